//! Solus requests encoded straight from the keys, for the load generator.
//!
//! The generator shares the machine's cores with the server it measures,
//! so what it spends per entity is taken from the server. Building a
//! `Vec<Bytes>` of keys and handing it to prost cost a reference count, a
//! copy and an encoding pass per key - with key generation, about a third
//! of the generator's CPU. Here each key is written once, into the
//! request body, in the wire format prost would write (`AddRequest`,
//! `CheckAbsenceRequest` and `AddIfAbsentRequest` share fields 1-3; field 4
//! is `ttl_ms` in the two writes but `record_ids` in `CheckAbsenceRequest`,
//! which therefore must be given `ttl_ms` 0, not written), and the response
//! body is not decoded: the bench needs only the status.

use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{WireType, encode_key, encode_varint};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use super::driver::KeySpace;

/// `client_id`, `deduper`, then the keys at `indices` as `entities` and,
/// when non-zero, `ttl_ms`: an encoded `AddRequest`, `CheckAbsenceRequest`
/// (pass `ttl_ms` 0) or `AddIfAbsentRequest` without request or record ids.
pub fn request_body(client_id: &str, deduper: &str, keys: &KeySpace, indices: &[usize], ttl_ms: u64) -> Bytes {
    let mut out = Vec::with_capacity(client_id.len() + deduper.len() + 16 + indices.len() * 20);
    bytes_field(&mut out, 1, client_id.as_bytes());
    bytes_field(&mut out, 2, deduper.as_bytes());
    keys.each(indices.iter().copied(), |key| bytes_field(&mut out, 3, key));
    if ttl_ms != 0 {
        encode_key(4, WireType::Varint, &mut out);
        encode_varint(ttl_ms, &mut out);
    }
    Bytes::from(out)
}

fn bytes_field(out: &mut Vec<u8>, tag: u32, value: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(value.len() as u64, out);
    out.extend_from_slice(value);
}

/// A gRPC codec that sends a body encoded already and skips the answer's.
#[derive(Debug, Clone, Copy, Default)]
pub struct Encoded;

impl Codec for Encoded {
    type Encode = Bytes;
    type Decode = ();
    type Encoder = Encoded;
    type Decoder = Encoded;

    fn encoder(&mut self) -> Encoded {
        Encoded
    }

    fn decoder(&mut self) -> Encoded {
        Encoded
    }
}

impl Encoder for Encoded {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Encoded {
    type Item = ();
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<()>, Status> {
        src.advance(src.remaining());
        Ok(Some(()))
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::api::pb;

    /// The body decodes, with prost, to the message prost would have sent.
    #[test]
    fn bodies_decode_as_the_requests_they_stand_for() {
        let keys = KeySpace::generated(1_000_000_000_000_000);
        let indices = [7, 0, 999_999_999_999, 1_000_000_000_000, 7];
        let want: Vec<Bytes> = keys.many(indices.iter().copied());
        let body = request_body("client-é", "d", &keys, &indices, 86_400_000);
        let got = pb::AddIfAbsentRequest::decode(body).unwrap();
        assert_eq!(
            got,
            pb::AddIfAbsentRequest {
                client_id: "client-é".into(),
                deduper: "d".into(),
                entities: want.clone(),
                ttl_ms: 86_400_000,
                request_id: None,
                record_ids: Vec::new(),
            }
        );
        assert_eq!(got.entities[3], Bytes::from_static(b"key:1000000000000"));
        let check = pb::CheckAbsenceRequest::decode(request_body("c", "d", &keys, &indices, 0)).unwrap();
        assert_eq!(check.entities, want);
        assert_eq!((check.client_id.as_str(), check.deduper.as_str()), ("c", "d"));
        let add = pb::AddRequest::decode(request_body("c", "d", &keys, &indices[..1], 1)).unwrap();
        assert_eq!((add.entities.len(), add.ttl_ms), (1, 1));
    }
}
