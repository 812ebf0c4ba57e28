//! Kerberos on a Thrift connection: credentials from the settings, the SASL
//! negotiation (`sasl.rs`) with a GSSAPI context (`gssapi.rs`), and errors
//! that name the setting to change.
//!
//! Credentials are acquired for every new connection. With a keytab they
//! live in a `MEMORY:` cache private to this store and MIT's library gets a
//! new ticket from the keytab whenever the cached one has expired, so new
//! connections authenticate by themselves however long the process runs;
//! an open connection keeps its context (HBase does not end it when the
//! ticket does), which is why `max_connection_age_seconds` bounds how long
//! revoked credentials keep working.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::config::{HbaseConfig, KerberosConfig};
use super::gssapi::{Context, CredentialSource, Gss, GssError};
use super::sasl::{self, Layer, Mechanism, NegotiationError, SaslReader, SaslWriter};

/// The longest wait for each negotiation answer, in ms (capped by
/// `read_timeout_ms`): a server without SASL never answers, and saying so
/// quickly beats waiting out the read timeout.
pub const NEGOTIATION_TIMEOUT_MS: u64 = 3_000;

/// Tells MEMORY: caches of several stores in one process apart.
static CACHE_ID: AtomicU64 = AtomicU64::new(0);

/// One store's Kerberos side.
pub struct Kerberos {
    gss: Gss,
    config: KerberosConfig,
    source: CredentialSource,
    negotiation_timeout: Duration,
    read_timeout: Duration,
}

impl GssError {
    fn has(&self, s: &str) -> bool {
        self.text.contains(s)
    }
}

impl Mechanism for Context {
    fn step(&mut self, input: &[u8]) -> Result<Vec<u8>, String> {
        Context::step(self, input).map_err(|e| e.to_string())
    }
    fn established(&self) -> bool {
        Context::established(self)
    }
    fn wrap(&mut self, data: &[u8], confidential: bool) -> Result<Vec<u8>, String> {
        Context::wrap(self, data, confidential).map_err(|e| e.to_string())
    }
    fn unwrap(&mut self, data: &[u8]) -> Result<(Vec<u8>, bool), String> {
        Context::unwrap(self, data).map_err(|e| e.to_string())
    }
}

/// The host part of `host:port` (`[v6]:port` too).
pub fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

impl Kerberos {
    /// Loads the library (and points it at `krb5_config`). Start-up errors:
    /// the library cannot be loaded, with its name and the Debian package.
    pub fn new(config: &HbaseConfig) -> Result<Kerberos, String> {
        let k = &config.kerberos;
        if !k.krb5_config.is_empty() && std::env::var_os("KRB5_CONFIG").as_deref() != Some(k.krb5_config.as_ref()) {
            // SAFETY: set once while the store opens, before any Kerberos
            // call reads it; nothing else in Solus reads the environment
            // concurrently at that point.
            unsafe { std::env::set_var("KRB5_CONFIG", &k.krb5_config) };
        }
        let gss = Gss::load(&k.library).map_err(|e| {
            format!(
                "storage.hbase.kerberos.enabled needs MIT's GSSAPI library, and storage.hbase.kerberos.library = \
                 {:?} cannot be loaded ({e}): install it (Debian/Ubuntu: apt-get install libgssapi-krb5-2) or \
                 point library at its path",
                k.library
            )
        })?;
        let non_empty = |s: &String| (!s.is_empty()).then(|| s.clone());
        let ccache = if k.keytab.is_empty() {
            non_empty(&k.ticket_cache)
        } else {
            let id = CACHE_ID.fetch_add(1, Ordering::Relaxed);
            Some(format!("MEMORY:solus-{}-{id}", std::process::id()))
        };
        Ok(Kerberos {
            gss,
            source: CredentialSource {
                principal: non_empty(&k.principal),
                keytab: non_empty(&k.keytab),
                ccache,
            },
            config: k.clone(),
            negotiation_timeout: Duration::from_millis(NEGOTIATION_TIMEOUT_MS.min(config.read_timeout_ms)),
            read_timeout: Duration::from_millis(config.read_timeout_ms),
        })
    }

    /// Where credentials come from, for messages.
    fn source_text(&self) -> String {
        let k = &self.config;
        let principal = if k.principal.is_empty() {
            "its default principal".to_string()
        } else {
            format!("principal {:?}", k.principal)
        };
        if !k.keytab.is_empty() {
            format!("{principal} from storage.hbase.kerberos.keytab = {:?}", k.keytab)
        } else if !k.ticket_cache.is_empty() {
            format!(
                "{principal} from storage.hbase.kerberos.ticket_cache = {:?}",
                k.ticket_cache
            )
        } else {
            format!("{principal} from the default ticket cache (no storage.hbase.kerberos.keytab or ticket_cache set)")
        }
    }

    /// The service principal's host for the server at `address`.
    fn server_host<'a>(&'a self, address: &'a str) -> &'a str {
        if self.config.server_host.is_empty() {
            host_of(address)
        } else {
            &self.config.server_host
        }
    }

    fn context(&self, address: &str) -> io::Result<Context> {
        let credential = self.gss.credential(&self.source).map_err(|e| {
            io::Error::other(format!(
                "Kerberos: no client credentials ({}): {e}{}",
                self.source_text(),
                credential_hint(&e)
            ))
        })?;
        let host = self.server_host(address);
        self.gss.context(&credential, &self.config.service, host).map_err(|e| {
            io::Error::other(format!(
                "Kerberos: bad server principal {}/{host}: {e}",
                self.config.service
            ))
        })
    }

    /// Authenticates the connection `stream` to `peer` (configured as
    /// `address`) and returns its two halves. Errors name the setting or the
    /// server's setting to change; the stream is then to be dropped.
    pub fn handshake(
        &self,
        stream: &TcpStream,
        address: &str,
        peer: SocketAddr,
    ) -> io::Result<(SaslReader<TcpStream>, SaslWriter<TcpStream>)> {
        let mut ctx = self.context(address)?;
        stream.set_read_timeout(Some(self.negotiation_timeout))?;
        let mut s = stream.try_clone()?;
        let min = self.config.min_qop;
        let qop = sasl::negotiate(&mut s, &mut ctx, min).map_err(|e| self.negotiation_error(e, address, peer))?;
        stream.set_read_timeout(Some(self.read_timeout))?;
        tracing::debug!(%peer, qop = qop.name(), "Kerberos: Thrift connection authenticated");
        let layer = Layer::new(qop, Box::new(ctx));
        Ok((
            SaslReader::new(stream.try_clone()?, layer.clone()),
            SaslWriter::new(stream.try_clone()?, layer),
        ))
    }

    fn negotiation_error(&self, e: NegotiationError, address: &str, peer: SocketAddr) -> io::Error {
        let at = format!("the Thrift server at {address} ({peer})");
        let host = self.server_host(address);
        let service = &self.config.service;
        let m = match e {
            NegotiationError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                format!(
                    "{at} did not answer SASL negotiation within {} ms: does it set hbase.thrift.security.qop? \
                     (storage.hbase.kerberos.enabled = true expects a Kerberized Thrift server; a plain one \
                     never answers)",
                    self.negotiation_timeout.as_millis()
                )
            }
            NegotiationError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => format!(
                "{at} closed the connection during SASL negotiation (it may have refused our ticket for \
                 {service}/{host}; its log says why)"
            ),
            NegotiationError::Io(e) => format!("{at}: SASL negotiation failed: {e}"),
            NegotiationError::Mechanism(m) => {
                let hint = if m.contains("not found in Kerberos database") {
                    format!(
                        ": the KDC has no principal {service}/{host}; set storage.hbase.kerberos.server_host \
                         (and service) to the host of the server's principal"
                    )
                } else if m.contains("No Kerberos credentials") || m.contains("expired") {
                    format!(
                        ": {}",
                        "check storage.hbase.kerberos.keytab / principal, or the ticket cache's tickets"
                    )
                } else {
                    String::new()
                };
                format!(
                    "Kerberos: authenticating to {service}/{host} for {at} ({}) failed: {m}{hint}",
                    self.source_text()
                )
            }
            NegotiationError::Refused(status, m) => format!(
                "{at} refused Kerberos authentication (SASL {status:?}): {m} (server principal \
                 {service}/{host}: storage.hbase.kerberos.service / server_host)"
            ),
            NegotiationError::Qop { offered, min } => {
                let names: Vec<&str> = offered.iter().map(|q| q.name()).collect();
                format!(
                    "{at} offers the security layer {} only, and storage.hbase.kerberos.min_qop = {} refuses \
                     anything weaker (never downgraded): set hbase.thrift.security.qop = {} on the server, or \
                     lower min_qop",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    },
                    min.name(),
                    min.name()
                )
            }
            NegotiationError::Protocol(m) => {
                format!("{at} does not speak Thrift's SASL protocol ({m}): does it set hbase.thrift.security.qop?")
            }
        };
        io::Error::new(io::ErrorKind::PermissionDenied, m)
    }
}

fn credential_hint(e: &GssError) -> &'static str {
    if e.has("No Kerberos credentials") || e.has("not found") || e.has("No credentials") {
        ": set storage.hbase.kerberos.keytab (and principal if the keytab holds several), or ticket_cache \
         to a cache kinit filled"
    } else if e.has("Key table") || e.has("keytab") {
        ": check storage.hbase.kerberos.keytab (and principal: it must be in the keytab)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_principal_host_is_the_address_host() {
        assert_eq!(host_of("hbase1.example.com:9090"), "hbase1.example.com");
        assert_eq!(host_of("[::1]:9090"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }

    #[test]
    fn a_missing_library_is_a_start_up_error_naming_it_and_the_package() {
        let mut c = HbaseConfig::default();
        c.kerberos.enabled = true;
        c.kerberos.library = "/nonexistent/libgssapi_krb5.so.2".into();
        let e = Kerberos::new(&c).err().unwrap();
        assert!(
            e.contains("storage.hbase.kerberos.library") && e.contains("/nonexistent/libgssapi_krb5.so.2"),
            "{e}"
        );
        assert!(e.contains("libgssapi-krb5-2"), "{e}");
    }
}
