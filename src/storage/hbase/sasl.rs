//! The client side of Thrift's SASL transport (`TSaslClientTransport`),
//! with the GSSAPI mechanism's security layer (RFC 4752), independent of
//! GSSAPI itself (a [`Mechanism`] does the tokens and wrapping).
//!
//! Negotiation: messages of 1 status byte ([`Status`]), a 4-byte big-endian
//! length and the payload. The client sends `START` + `"GSSAPI"` and `OK` +
//! its first token; tokens go back and forth in `OK` messages until the
//! context is established (the client's last one is empty); the server then
//! sends its security-layer offer (wrapped: one byte of layer bits, 3 bytes
//! of max buffer), the client answers with its choice (wrapped) in
//! `COMPLETE`, and the server ends with `COMPLETE`.
//!
//! Afterwards every flush is one frame: 4-byte big-endian length + payload,
//! the payload wrapped for integrity or privacy; every answer is one frame.

use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};

use super::config::Qop;

/// The mechanism Solus speaks.
pub const MECHANISM: &str = "GSSAPI";
/// The largest frame read, in bytes: a guard against garbage lengths
/// (HBase's answers are far smaller; requests are split at max_request_bytes).
pub const MAX_FRAME_BYTES: usize = 256 << 20;
/// The largest wrapped message the client says it accepts (RFC 4752's
/// 3-byte field; Thrift sends each answer as one message).
pub const CLIENT_MAX_BUFFER: u32 = 0xff_ffff;

/// A negotiation message's status byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Start = 1,
    Ok = 2,
    Bad = 3,
    Error = 4,
    Complete = 5,
}

impl Status {
    fn from_byte(b: u8) -> Option<Status> {
        Some(match b {
            1 => Status::Start,
            2 => Status::Ok,
            3 => Status::Bad,
            4 => Status::Error,
            5 => Status::Complete,
            _ => return None,
        })
    }
}

/// What a mechanism must do; GSSAPI's `Context` in production, a fake in
/// the unit tests. Errors are texts for the operator.
pub trait Mechanism: Send {
    /// The next token from the server's last one (empty at first).
    fn step(&mut self, input: &[u8]) -> Result<Vec<u8>, String>;
    /// Whether the security context is established.
    fn established(&self) -> bool;
    fn wrap(&mut self, data: &[u8], confidential: bool) -> Result<Vec<u8>, String>;
    /// The data, and whether it was encrypted.
    fn unwrap(&mut self, data: &[u8]) -> Result<(Vec<u8>, bool), String>;
}

/// Why negotiation failed.
#[derive(Debug)]
pub enum NegotiationError {
    /// Reading or writing the socket failed (a timeout included).
    Io(io::Error),
    /// The mechanism failed (e.g. no ticket could be had).
    Mechanism(String),
    /// The server answered `BAD` or `ERROR`, with its message.
    Refused(Status, String),
    /// The server offered no layer at least `min_qop`.
    Qop { offered: Vec<Qop>, min: Qop },
    /// Bytes that are not this protocol.
    Protocol(String),
}

impl From<io::Error> for NegotiationError {
    fn from(e: io::Error) -> Self {
        NegotiationError::Io(e)
    }
}

/// Encodes one negotiation message.
pub fn message(status: Status, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(5 + payload.len());
    m.push(status as u8);
    m.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    m.extend_from_slice(payload);
    m
}

/// Reads one negotiation message.
pub fn read_message(r: &mut impl Read) -> Result<(Status, Vec<u8>), NegotiationError> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)?;
    let status = Status::from_byte(head[0])
        .ok_or_else(|| NegotiationError::Protocol(format!("status byte {} is not a SASL status", head[0])))?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(NegotiationError::Protocol(format!("SASL message of {len} bytes")));
    }
    let mut payload = vec![0; len];
    r.read_exact(&mut payload)?;
    if matches!(status, Status::Bad | Status::Error) {
        return Err(NegotiationError::Refused(
            status,
            String::from_utf8_lossy(&payload).into_owned(),
        ));
    }
    Ok((status, payload))
}

/// The layers a security-layer offer's bit mask names, lowest first.
pub fn offered(mask: u8) -> Vec<Qop> {
    Qop::ALL.into_iter().filter(|q| mask & q.layer_bit() != 0).collect()
}

/// Parses the server's (unwrapped) security-layer offer: layer bit mask
/// and max buffer size. Errors: not 4 bytes.
pub fn parse_offer(b: &[u8]) -> Result<(u8, u32), NegotiationError> {
    match b {
        [mask, a, b, c] => Ok((*mask, u32::from_be_bytes([0, *a, *b, *c]))),
        _ => Err(NegotiationError::Protocol(format!(
            "security-layer offer of {} bytes (RFC 4752 says 4)",
            b.len()
        ))),
    }
}

/// The strongest offered layer, if it is at least `min` (never a weaker one).
pub fn choose(mask: u8, min: Qop) -> Result<Qop, NegotiationError> {
    let offered = offered(mask);
    match offered.last() {
        Some(&best) if best >= min => Ok(best),
        _ => Err(NegotiationError::Qop { offered, min }),
    }
}

/// The client's (unwrapped) answer: the chosen layer and the max buffer it
/// accepts (0 with no layer, as RFC 4752 says); no authorization id, so the
/// server authorizes the authenticated principal itself.
pub fn reply(chosen: Qop) -> [u8; 4] {
    let max = if chosen == Qop::Authentication {
        0
    } else {
        CLIENT_MAX_BUFFER
    };
    let m = max.to_be_bytes();
    [chosen.layer_bit(), m[1], m[2], m[3]]
}

/// Runs the negotiation on `stream`; returns the layer in force.
pub fn negotiate<S: Read + Write>(stream: &mut S, mech: &mut dyn Mechanism, min: Qop) -> Result<Qop, NegotiationError> {
    let first = mech.step(&[]).map_err(NegotiationError::Mechanism)?;
    let mut out = message(Status::Start, MECHANISM.as_bytes());
    out.extend_from_slice(&message(Status::Ok, &first));
    stream.write_all(&out)?;
    stream.flush()?;
    while !mech.established() {
        let (status, token) = read_message(stream)?;
        if status != Status::Ok {
            return Err(NegotiationError::Protocol(format!(
                "expected OK with a token, got {status:?}"
            )));
        }
        let next = mech.step(&token).map_err(NegotiationError::Mechanism)?;
        stream.write_all(&message(Status::Ok, &next))?;
        stream.flush()?;
    }
    let (status, wrapped) = read_message(stream)?;
    if status != Status::Ok {
        return Err(NegotiationError::Protocol(format!(
            "expected the security-layer offer, got {status:?}"
        )));
    }
    let (offer, _) = mech.unwrap(&wrapped).map_err(NegotiationError::Mechanism)?;
    let (mask, _server_max) = parse_offer(&offer)?;
    let chosen = choose(mask, min)?;
    let answer = mech.wrap(&reply(chosen), false).map_err(NegotiationError::Mechanism)?;
    stream.write_all(&message(Status::Complete, &answer))?;
    stream.flush()?;
    let (status, _) = read_message(stream)?;
    if status != Status::Complete {
        return Err(NegotiationError::Protocol(format!("expected COMPLETE, got {status:?}")));
    }
    Ok(chosen)
}

/// The negotiated layer and mechanism, shared by a connection's two halves
/// (never used by both at once: one call at a time per connection).
#[derive(Clone)]
pub struct Layer {
    qop: Qop,
    mech: Arc<Mutex<Box<dyn Mechanism>>>,
}

impl Layer {
    pub fn new(qop: Qop, mech: Box<dyn Mechanism>) -> Layer {
        Layer {
            qop,
            mech: Arc::new(Mutex::new(mech)),
        }
    }

    fn wrap(&self, data: Vec<u8>) -> io::Result<Vec<u8>> {
        if self.qop == Qop::Authentication {
            return Ok(data);
        }
        let mut m = self.mech.lock().unwrap_or_else(|p| p.into_inner());
        m.wrap(&data, self.qop == Qop::Privacy).map_err(io::Error::other)
    }

    fn unwrap(&self, data: Vec<u8>) -> io::Result<Vec<u8>> {
        if self.qop == Qop::Authentication {
            return Ok(data);
        }
        let mut m = self.mech.lock().unwrap_or_else(|p| p.into_inner());
        let (plain, encrypted) = m.unwrap(&data).map_err(io::Error::other)?;
        if self.qop == Qop::Privacy && !encrypted {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "an unencrypted frame under the privacy layer",
            ));
        }
        Ok(plain)
    }
}

/// The read half: one frame at a time, unwrapped.
pub struct SaslReader<R> {
    inner: R,
    layer: Layer,
    frame: Vec<u8>,
    pos: usize,
}

impl<R: Read> SaslReader<R> {
    pub fn new(inner: R, layer: Layer) -> Self {
        SaslReader {
            inner,
            layer,
            frame: Vec::new(),
            pos: 0,
        }
    }
}

impl<R: Read> Read for SaslReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.pos == self.frame.len() {
            let mut len = [0u8; 4];
            self.inner.read_exact(&mut len)?;
            let len = u32::from_be_bytes(len) as usize;
            if len > MAX_FRAME_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("SASL frame of {len} bytes (more than {MAX_FRAME_BYTES})"),
                ));
            }
            let mut payload = vec![0; len];
            self.inner.read_exact(&mut payload)?;
            self.frame = self.layer.unwrap(payload)?;
            self.pos = 0;
        }
        let n = buf.len().min(self.frame.len() - self.pos);
        buf[..n].copy_from_slice(&self.frame[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The write half: buffers until flush, then sends one wrapped frame.
pub struct SaslWriter<W> {
    inner: W,
    layer: Layer,
    pending: Vec<u8>,
}

impl<W: Write> SaslWriter<W> {
    pub fn new(inner: W, layer: Layer) -> Self {
        SaslWriter {
            inner,
            layer,
            pending: Vec::new(),
        }
    }
}

impl<W: Write> Write for SaslWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            let payload = self.layer.wrap(std::mem::take(&mut self.pending))?;
            let mut frame = Vec::with_capacity(4 + payload.len());
            frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            frame.extend_from_slice(&payload);
            self.inner.write_all(&frame)?;
        }
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for GSSAPI: two tokens, then "wrap" = a conf byte + the
    /// data (reversed when confidential), so tests can see what was asked.
    struct Fake {
        steps: usize,
    }

    impl Mechanism for Fake {
        fn step(&mut self, input: &[u8]) -> Result<Vec<u8>, String> {
            self.steps += 1;
            match self.steps {
                1 => Ok(b"ap-req".to_vec()),
                2 if input == b"ap-rep" => Ok(Vec::new()),
                _ => Err(format!("unexpected token {input:?}")),
            }
        }
        fn established(&self) -> bool {
            self.steps >= 2
        }
        fn wrap(&mut self, data: &[u8], confidential: bool) -> Result<Vec<u8>, String> {
            let mut d = data.to_vec();
            if confidential {
                d.reverse();
            }
            d.insert(0, confidential as u8);
            Ok(d)
        }
        fn unwrap(&mut self, data: &[u8]) -> Result<(Vec<u8>, bool), String> {
            let (conf, rest) = data.split_first().ok_or("empty")?;
            let mut d = rest.to_vec();
            if *conf == 1 {
                d.reverse();
            }
            Ok((d, *conf == 1))
        }
    }

    /// A scripted peer: reads from `input`, collects what the client wrote.
    struct Peer {
        input: io::Cursor<Vec<u8>>,
        written: Vec<u8>,
    }

    impl Read for Peer {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }
    impl Write for Peer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.written.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// The server's side of a negotiation offering `mask`.
    fn server_script(mask: u8) -> Vec<u8> {
        let mut s = message(Status::Ok, b"ap-rep");
        // The offer is wrapped without confidentiality: conf byte 0.
        s.extend_from_slice(&message(Status::Ok, &[0, mask, 0x00, 0x10, 0x00]));
        s.extend_from_slice(&message(Status::Complete, b""));
        s
    }

    fn run(mask: u8, min: Qop) -> (Result<Qop, NegotiationError>, Vec<u8>) {
        let mut peer = Peer {
            input: io::Cursor::new(server_script(mask)),
            written: Vec::new(),
        };
        let r = negotiate(&mut peer, &mut Fake { steps: 0 }, min);
        (r, peer.written)
    }

    #[test]
    fn negotiation_bytes_are_thrift_sasl_and_rfc_4752() {
        let (r, written) = run(0x04, Qop::Privacy);
        assert_eq!(r.unwrap(), Qop::Privacy);
        let mut expected = vec![1, 0, 0, 0, 6];
        expected.extend_from_slice(b"GSSAPI");
        expected.extend_from_slice(&[2, 0, 0, 0, 6]);
        expected.extend_from_slice(b"ap-req");
        // The empty token once the context is established.
        expected.extend_from_slice(&[2, 0, 0, 0, 0]);
        // COMPLETE + wrap(not confidential) of [layer 0x04, max 0xffffff].
        expected.extend_from_slice(&[5, 0, 0, 0, 5, 0, 0x04, 0xff, 0xff, 0xff]);
        assert_eq!(written, expected);
    }

    #[test]
    fn the_strongest_offered_layer_is_chosen_and_never_a_weaker_one() {
        assert_eq!(choose(0x07, Qop::Authentication).unwrap(), Qop::Privacy);
        assert_eq!(choose(0x03, Qop::Integrity).unwrap(), Qop::Integrity);
        assert_eq!(choose(0x01, Qop::Authentication).unwrap(), Qop::Authentication);
        for (mask, min) in [
            (0x01, Qop::Privacy),
            (0x02, Qop::Privacy),
            (0x01, Qop::Integrity),
            (0, Qop::Authentication),
        ] {
            match choose(mask, min) {
                Err(NegotiationError::Qop { offered: o, min: m }) => {
                    assert_eq!((o, m), (offered(mask), min));
                }
                other => panic!("{mask:#x} {min:?}: {other:?}"),
            }
        }
        // Authentication only: the reply's max buffer is 0 (RFC 4752).
        assert_eq!(reply(Qop::Authentication), [0x01, 0, 0, 0]);
        assert_eq!(reply(Qop::Integrity), [0x02, 0xff, 0xff, 0xff]);
        assert_eq!(parse_offer(&[0x06, 0x01, 0x00, 0x00]).unwrap(), (0x06, 65536));
        assert!(parse_offer(&[0x06, 0x01]).is_err());
    }

    #[test]
    fn a_downgrade_is_refused_before_completing() {
        let (r, written) = run(0x01, Qop::Privacy);
        assert!(matches!(r, Err(NegotiationError::Qop { .. })), "{r:?}");
        // The client never sent COMPLETE.
        assert!(!written.windows(1).any(|w| w[0] == 5), "{written:?}");
    }

    #[test]
    fn a_server_refusal_carries_its_message() {
        let mut peer = Peer {
            input: io::Cursor::new(message(Status::Bad, b"GSS initiate failed")),
            written: Vec::new(),
        };
        match negotiate(&mut peer, &mut Fake { steps: 0 }, Qop::Privacy) {
            Err(NegotiationError::Refused(Status::Bad, m)) => assert_eq!(m, "GSS initiate failed"),
            other => panic!("{other:?}"),
        }
        // A Thrift answer (strict binary: 0x80 0x01 ...) is not SASL.
        let mut peer = Peer {
            input: io::Cursor::new(vec![0x80, 1, 0, 2, 0, 0]),
            written: Vec::new(),
        };
        assert!(matches!(
            negotiate(&mut peer, &mut Fake { steps: 0 }, Qop::Privacy),
            Err(NegotiationError::Protocol(_))
        ));
    }

    fn layer(qop: Qop) -> Layer {
        Layer::new(qop, Box::new(Fake { steps: 2 }))
    }

    #[test]
    fn each_flush_is_one_length_prefixed_wrapped_frame() {
        for (qop, conf) in [
            (Qop::Privacy, Some(1u8)),
            (Qop::Integrity, Some(0)),
            (Qop::Authentication, None),
        ] {
            let mut w = SaslWriter::new(Vec::new(), layer(qop));
            w.write_all(b"ab").unwrap();
            w.write_all(b"c").unwrap();
            assert!(w.inner.is_empty(), "nothing sent before the flush");
            w.flush().unwrap();
            w.flush().unwrap(); // nothing pending: no empty frame
            let body: Vec<u8> = match conf {
                Some(1) => vec![1, b'c', b'b', b'a'],
                Some(_) => vec![0, b'a', b'b', b'c'],
                None => b"abc".to_vec(),
            };
            let mut expected = (body.len() as u32).to_be_bytes().to_vec();
            expected.extend_from_slice(&body);
            assert_eq!(w.inner, expected, "{qop:?}");
            // And back through the reader, in small reads.
            let mut r = SaslReader::new(io::Cursor::new([expected.clone(), expected].concat()), layer(qop));
            let mut got = Vec::new();
            let mut one = [0u8; 2];
            while got.len() < 6 {
                let n = r.read(&mut one).unwrap();
                got.extend_from_slice(&one[..n]);
            }
            assert_eq!(got, b"abcabc");
        }
    }

    #[test]
    fn an_unencrypted_frame_is_refused_under_privacy() {
        let frame = [0, 0, 0, 3, 0, b'h', b'i'];
        let mut r = SaslReader::new(io::Cursor::new(frame.to_vec()), layer(Qop::Privacy));
        let e = r.read(&mut [0u8; 8]).unwrap_err();
        assert!(e.to_string().contains("unencrypted"), "{e}");
        let mut r = SaslReader::new(io::Cursor::new(frame.to_vec()), layer(Qop::Integrity));
        let mut out = [0u8; 8];
        assert_eq!(r.read(&mut out).unwrap(), 2);
        let huge = [0xff, 0xff, 0xff, 0xff];
        let mut r = SaslReader::new(io::Cursor::new(huge.to_vec()), layer(Qop::Integrity));
        assert!(r.read(&mut out).is_err());
    }
}
