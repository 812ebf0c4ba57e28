package dev.solus.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.TlsChannelCredentials;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;

/** Opening the client's channel: the address forms, TLS, and the bearer token header. */
final class Channels {
    private static final Metadata.Key<String> AUTHORIZATION =
            Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

    private Channels() {
    }

    /**
     * A channel to {@code address} ({@code host:port}, {@code host}, {@code http://} or
     * {@code https://}); TLS when https or any certificate file is given (PEM paths, null = none).
     */
    static ManagedChannel open(String address, String caCertFile, String clientCertFile,
            String clientKeyFile, String tlsAuthority) {
        String addr = address;
        boolean tls = caCertFile != null || clientCertFile != null;
        if (addr.startsWith("https://")) {
            tls = true;
            addr = addr.substring("https://".length());
        } else if (addr.startsWith("http://")) {
            if (tls) {
                throw new IllegalArgumentException("address " + address
                        + " says plaintext (http://) but a CA or client certificate was given: use https:// or host:port");
            }
            addr = addr.substring("http://".length());
        }
        if (addr.endsWith("/")) {
            addr = addr.substring(0, addr.length() - 1);
        }
        HostPort hp = HostPort.parse(addr, address);
        ChannelCredentials creds;
        if (tls) {
            TlsChannelCredentials.Builder t = TlsChannelCredentials.newBuilder();
            try {
                if (caCertFile != null) {
                    t.trustManager(new File(caCertFile));
                }
                if (clientCertFile != null) {
                    t.keyManager(new File(clientCertFile), new File(clientKeyFile));
                }
            } catch (IOException e) {
                throw new UncheckedIOException("reading the TLS files (caCertificate " + caCertFile
                        + ", clientCertificate " + clientCertFile + ", clientKey " + clientKeyFile + ")", e);
            }
            creds = t.build();
        } else {
            creds = InsecureChannelCredentials.create();
        }
        ManagedChannelBuilder<?> mb = Grpc.newChannelBuilderForAddress(hp.host, hp.port, creds)
                .maxInboundMessageSize(16 * 1024 * 1024);
        if (tlsAuthority != null) {
            mb.overrideAuthority(tlsAuthority);
        }
        return mb.build();
    }

    private record HostPort(String host, int port) {
        static HostPort parse(String s, String original) {
            String host = s;
            int port = SolusClient.DEFAULT_PORT;
            int colon = s.lastIndexOf(':');
            if (s.startsWith("[")) {
                int close = s.indexOf(']');
                if (close < 0) {
                    throw new IllegalArgumentException("address " + original + ": missing ] after an IPv6 host");
                }
                host = s.substring(1, close);
                colon = s.indexOf(':', close);
            } else if (colon >= 0 && s.indexOf(':') != colon) {
                throw new IllegalArgumentException("address " + original
                        + ": put an IPv6 host in brackets, e.g. [::1]:50051");
            }
            if (colon >= 0) {
                if (!s.startsWith("[")) {
                    host = s.substring(0, colon);
                }
                try {
                    port = Integer.parseInt(s.substring(colon + 1));
                } catch (NumberFormatException e) {
                    throw new IllegalArgumentException("address " + original + ": the port is not a number");
                }
                if (port < 1 || port > 65535) {
                    throw new IllegalArgumentException("address " + original + ": the port is outside 1-65535");
                }
            }
            if (host.isEmpty()) {
                throw new IllegalArgumentException("address " + original + ": the host is empty");
            }
            return new HostPort(host, port);
        }
    }

    static ClientInterceptor bearer(String token) {
        String value = "Bearer " + token;
        return new ClientInterceptor() {
            @Override
            public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
                return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
                    @Override
                    public void start(Listener<R> listener, Metadata headers) {
                        headers.put(AUTHORIZATION, value);
                        super.start(listener, headers);
                    }
                };
            }
        };
    }
}
