//! Protocol-level pieces the generated processor does not provide: replaying
//! an already-read message header, writing replies by hand, `createTable`
//! argument decoding with IDL defaults, and a framed reader with a frame cap.

use std::io::{self, Read};

use hbase_thrift::hbase::{AlreadyExists, ColumnDescriptor, IOError, IllegalArgument};
use thrift::protocol::{
    TFieldIdentifier, TInputProtocol, TListIdentifier, TMapIdentifier, TMessageIdentifier, TMessageType,
    TOutputProtocol, TSetIdentifier, TStructIdentifier, TType,
};
use thrift::{ApplicationError, ApplicationErrorKind};

/// Hands a message header that was already read (to count, delay or fail the
/// call) back to the generated processor, then reads through.
pub(crate) struct ReplayInput<'a> {
    header: Option<TMessageIdentifier>,
    inner: &'a mut dyn TInputProtocol,
}

impl<'a> ReplayInput<'a> {
    pub fn new(header: TMessageIdentifier, inner: &'a mut dyn TInputProtocol) -> Self {
        Self {
            header: Some(header),
            inner,
        }
    }
}

impl TInputProtocol for ReplayInput<'_> {
    fn read_message_begin(&mut self) -> thrift::Result<TMessageIdentifier> {
        match self.header.take() {
            Some(header) => Ok(header),
            None => self.inner.read_message_begin(),
        }
    }
    fn read_message_end(&mut self) -> thrift::Result<()> {
        self.inner.read_message_end()
    }
    fn read_struct_begin(&mut self) -> thrift::Result<Option<TStructIdentifier>> {
        self.inner.read_struct_begin()
    }
    fn read_struct_end(&mut self) -> thrift::Result<()> {
        self.inner.read_struct_end()
    }
    fn read_field_begin(&mut self) -> thrift::Result<TFieldIdentifier> {
        self.inner.read_field_begin()
    }
    fn read_field_end(&mut self) -> thrift::Result<()> {
        self.inner.read_field_end()
    }
    fn read_bool(&mut self) -> thrift::Result<bool> {
        self.inner.read_bool()
    }
    fn read_bytes(&mut self) -> thrift::Result<Vec<u8>> {
        self.inner.read_bytes()
    }
    fn read_i8(&mut self) -> thrift::Result<i8> {
        self.inner.read_i8()
    }
    fn read_i16(&mut self) -> thrift::Result<i16> {
        self.inner.read_i16()
    }
    fn read_i32(&mut self) -> thrift::Result<i32> {
        self.inner.read_i32()
    }
    fn read_i64(&mut self) -> thrift::Result<i64> {
        self.inner.read_i64()
    }
    fn read_double(&mut self) -> thrift::Result<f64> {
        self.inner.read_double()
    }
    fn read_string(&mut self) -> thrift::Result<String> {
        self.inner.read_string()
    }
    fn read_list_begin(&mut self) -> thrift::Result<TListIdentifier> {
        self.inner.read_list_begin()
    }
    fn read_list_end(&mut self) -> thrift::Result<()> {
        self.inner.read_list_end()
    }
    fn read_set_begin(&mut self) -> thrift::Result<TSetIdentifier> {
        self.inner.read_set_begin()
    }
    fn read_set_end(&mut self) -> thrift::Result<()> {
        self.inner.read_set_end()
    }
    fn read_map_begin(&mut self) -> thrift::Result<TMapIdentifier> {
        self.inner.read_map_begin()
    }
    fn read_map_end(&mut self) -> thrift::Result<()> {
        self.inner.read_map_end()
    }
    fn read_byte(&mut self) -> thrift::Result<u8> {
        self.inner.read_byte()
    }
}

/// Skips a call's argument struct (for calls answered without the processor).
pub(crate) fn skip_args(i_prot: &mut dyn TInputProtocol) -> thrift::Result<()> {
    skip_binary_safe(i_prot, TType::Struct, 0)?;
    i_prot.read_message_end()
}

/// Like `TInputProtocol::skip`, but reads strings as raw bytes: thrift's own
/// skip decodes them as UTF-8 and fails on binary row keys, which would drop
/// the connection instead of answering.
fn skip_binary_safe(i: &mut dyn TInputProtocol, t: TType, depth: u8) -> thrift::Result<()> {
    if depth > 64 {
        return Err(thrift::Error::Protocol(thrift::ProtocolError::new(
            thrift::ProtocolErrorKind::DepthLimit,
            "argument nesting deeper than 64",
        )));
    }
    match t {
        TType::Bool => i.read_bool().map(drop),
        TType::I08 => i.read_i8().map(drop),
        TType::I16 => i.read_i16().map(drop),
        TType::I32 => i.read_i32().map(drop),
        TType::I64 => i.read_i64().map(drop),
        TType::Double => i.read_double().map(drop),
        TType::String => i.read_bytes().map(drop),
        TType::Struct => {
            i.read_struct_begin()?;
            loop {
                let f = i.read_field_begin()?;
                if f.field_type == TType::Stop {
                    break;
                }
                skip_binary_safe(i, f.field_type, depth + 1)?;
                i.read_field_end()?;
            }
            i.read_struct_end()
        }
        TType::List => {
            let l = i.read_list_begin()?;
            for _ in 0..l.size {
                skip_binary_safe(i, l.element_type, depth + 1)?;
            }
            i.read_list_end()
        }
        TType::Set => {
            let st = i.read_set_begin()?;
            for _ in 0..st.size {
                skip_binary_safe(i, st.element_type, depth + 1)?;
            }
            i.read_set_end()
        }
        TType::Map => {
            let m = i.read_map_begin()?;
            if let (Some(k), Some(v)) = (m.key_type, m.value_type) {
                for _ in 0..m.size {
                    skip_binary_safe(i, k, depth + 1)?;
                    skip_binary_safe(i, v, depth + 1)?;
                }
            }
            i.read_map_end()
        }
        other => i.skip(other),
    }
}

/// Writes a `Reply` whose result struct holds what `fields` writes.
fn reply(
    o_prot: &mut dyn TOutputProtocol,
    call: &str,
    seq: i32,
    fields: impl FnOnce(&mut dyn TOutputProtocol) -> thrift::Result<()>,
) -> thrift::Result<()> {
    o_prot.write_message_begin(&TMessageIdentifier::new(call, TMessageType::Reply, seq))?;
    o_prot.write_struct_begin(&TStructIdentifier::new(format!("{call}_result")))?;
    fields(o_prot)?;
    o_prot.write_field_stop()?;
    o_prot.write_struct_end()?;
    o_prot.write_message_end()?;
    o_prot.flush()
}

fn exception_field(
    o_prot: &mut dyn TOutputProtocol,
    id: i16,
    name: &str,
    write: impl FnOnce(&mut dyn TOutputProtocol) -> thrift::Result<()>,
) -> thrift::Result<()> {
    o_prot.write_field_begin(&TFieldIdentifier::new(name, TType::Struct, id))?;
    write(o_prot)?;
    o_prot.write_field_end()
}

/// Answers with a `TApplicationException`.
pub(crate) fn application_exception(
    o_prot: &mut dyn TOutputProtocol,
    call: &str,
    seq: i32,
    error: &ApplicationError,
) -> thrift::Result<()> {
    let header = TMessageIdentifier::new(call, TMessageType::Exception, seq);
    o_prot.write_message_begin(&header)?;
    thrift::Error::write_application_error_to_out_protocol(error, o_prot)?;
    o_prot.write_message_end()?;
    o_prot.flush()
}

/// Answers a call with an `IOError`. Every HBase call that declares one has
/// it as result field 1; the few that declare none get an application error.
pub(crate) fn io_error_reply(
    o_prot: &mut dyn TOutputProtocol,
    call: &str,
    seq: i32,
    error: &IOError,
) -> thrift::Result<()> {
    if matches!(call, "getThriftServerType" | "getClusterId") {
        let message = error.message.clone().unwrap_or_default();
        let app = ApplicationError::new(ApplicationErrorKind::InternalError, message);
        return application_exception(o_prot, call, seq, &app);
    }
    reply(o_prot, call, seq, |o| {
        exception_field(o, 1, "io", |o| error.write_to_out_protocol(o))
    })
}

/// Reads `createTable` arguments, filling unset `ColumnDescriptor` fields with
/// the IDL defaults (maxVersions 3, "NONE", forever...) the Java server uses;
/// the generated Rust reader would substitute zeros instead.
pub(crate) fn read_create_table_args(
    i_prot: &mut dyn TInputProtocol,
) -> thrift::Result<(Vec<u8>, Vec<ColumnDescriptor>)> {
    let mut name = Vec::new();
    let mut families = Vec::new();
    i_prot.read_struct_begin()?;
    loop {
        let field = i_prot.read_field_begin()?;
        match (field.id, field.field_type) {
            (_, TType::Stop) => break,
            (Some(1), TType::String) => name = i_prot.read_bytes()?,
            (Some(2), TType::List) => {
                let list = i_prot.read_list_begin()?;
                for _ in 0..list.size {
                    families.push(read_column_descriptor(i_prot)?);
                }
                i_prot.read_list_end()?;
            }
            (_, other) => i_prot.skip(other)?,
        }
        i_prot.read_field_end()?;
    }
    i_prot.read_struct_end()?;
    i_prot.read_message_end()?;
    Ok((name, families))
}

fn read_column_descriptor(i_prot: &mut dyn TInputProtocol) -> thrift::Result<ColumnDescriptor> {
    let mut cd = ColumnDescriptor::new(
        None,
        3,
        "NONE".to_owned(),
        false,
        "NONE".to_owned(),
        0,
        0,
        false,
        i32::MAX,
    );
    i_prot.read_struct_begin()?;
    loop {
        let field = i_prot.read_field_begin()?;
        match (field.id, field.field_type) {
            (_, TType::Stop) => break,
            (Some(1), TType::String) => cd.name = Some(i_prot.read_bytes()?),
            (Some(2), TType::I32) => cd.max_versions = Some(i_prot.read_i32()?),
            (Some(3), TType::String) => cd.compression = Some(i_prot.read_string()?),
            (Some(4), TType::Bool) => cd.in_memory = Some(i_prot.read_bool()?),
            (Some(5), TType::String) => cd.bloom_filter_type = Some(i_prot.read_string()?),
            (Some(6), TType::I32) => cd.bloom_filter_vector_size = Some(i_prot.read_i32()?),
            (Some(7), TType::I32) => cd.bloom_filter_nb_hashes = Some(i_prot.read_i32()?),
            (Some(8), TType::Bool) => cd.block_cache_enabled = Some(i_prot.read_bool()?),
            (Some(9), TType::I32) => cd.time_to_live = Some(i_prot.read_i32()?),
            (_, other) => i_prot.skip(other)?,
        }
        i_prot.read_field_end()?;
    }
    i_prot.read_struct_end()?;
    Ok(cd)
}

/// Writes `createTable`'s reply (exceptions: io=1, ia=2, exist=3).
pub(crate) fn write_create_table_reply(
    o_prot: &mut dyn TOutputProtocol,
    seq: i32,
    result: thrift::Result<()>,
) -> thrift::Result<()> {
    const CALL: &str = "createTable";
    let user = match result {
        Ok(()) => return reply(o_prot, CALL, seq, |_| Ok(())),
        Err(thrift::Error::User(user)) => user,
        Err(thrift::Error::Application(app)) => {
            return application_exception(o_prot, CALL, seq, &app);
        }
        Err(other) => {
            let app = ApplicationError::new(ApplicationErrorKind::Unknown, format!("{other:?}"));
            return application_exception(o_prot, CALL, seq, &app);
        }
    };
    if let Some(e) = user.downcast_ref::<IOError>() {
        reply(o_prot, CALL, seq, |o| {
            exception_field(o, 1, "io", |o| e.write_to_out_protocol(o))
        })
    } else if let Some(e) = user.downcast_ref::<IllegalArgument>() {
        reply(o_prot, CALL, seq, |o| {
            exception_field(o, 2, "ia", |o| e.write_to_out_protocol(o))
        })
    } else if let Some(e) = user.downcast_ref::<AlreadyExists>() {
        reply(o_prot, CALL, seq, |o| {
            exception_field(o, 3, "exist", |o| e.write_to_out_protocol(o))
        })
    } else {
        let app = ApplicationError::new(ApplicationErrorKind::Unknown, user.to_string());
        application_exception(o_prot, CALL, seq, &app)
    }
}

/// Framed-transport reader that, like Java's `TFramedTransport`, refuses
/// frames above a maximum size (HBase: 2 MiB by default), which closes the
/// connection.
pub(crate) struct FramedReader<R> {
    inner: R,
    frame: Vec<u8>,
    pos: usize,
    max_frame: usize,
}

impl<R: Read> FramedReader<R> {
    pub fn new(inner: R, max_frame: usize) -> Self {
        Self {
            inner,
            frame: Vec::new(),
            pos: 0,
            max_frame,
        }
    }
}

impl<R: Read> Read for FramedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.frame.len() {
            let mut header = [0u8; 4];
            self.inner.read_exact(&mut header)?;
            let size = i32::from_be_bytes(header);
            let size = usize::try_from(size)
                .ok()
                .filter(|&s| s <= self.max_frame)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("Frame size ({size}) larger than max length ({})!", self.max_frame),
                    )
                })?;
            self.frame.resize(size, 0);
            self.inner.read_exact(&mut self.frame)?;
            self.pos = 0;
        }
        let n = buf.len().min(self.frame.len() - self.pos);
        buf[..n].copy_from_slice(&self.frame[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framed_reader_enforces_the_cap() {
        let mut data = 3i32.to_be_bytes().to_vec();
        data.extend_from_slice(b"abc");
        data.extend_from_slice(&100i32.to_be_bytes());
        let mut reader = FramedReader::new(&data[..], 10);
        let mut buf = [0u8; 8];
        assert_eq!(reader.read(&mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"abc");
        assert_eq!(reader.read(&mut buf).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
