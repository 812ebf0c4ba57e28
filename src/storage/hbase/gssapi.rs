//! The system's MIT GSSAPI library (`libgssapi_krb5.so.2`), loaded at run
//! time with `libloading`: the default build needs no Kerberos headers, and
//! one binary serves plain and Kerberized clusters. The dozen `gss_*`
//! functions Solus needs are bound by hand here, and only here; the rest of
//! the crate sees [`Gss`], [`Credential`] and [`Context`], which own their
//! handles and release them on drop.
//!
//! Types follow MIT's `gssapi.h` on Unix (no `#pragma pack`): `OM_uint32`
//! is `u32`, buffers are `(size_t, void*)`, OIDs `(OM_uint32, void*)`.

use std::ffi::{CString, c_int, c_void};
use std::fmt;
use std::ptr;
use std::sync::Arc;

type Minor = *mut u32;
type Name = *mut c_void;
type Ctx = *mut c_void;
type Cred = *mut c_void;

#[repr(C)]
struct Buffer {
    length: usize,
    value: *mut c_void,
}

impl Buffer {
    fn empty() -> Buffer {
        Buffer {
            length: 0,
            value: ptr::null_mut(),
        }
    }

    /// A borrowed view of `bytes` (GSSAPI only reads input buffers).
    fn of(bytes: &[u8]) -> Buffer {
        Buffer {
            length: bytes.len(),
            value: bytes.as_ptr() as *mut c_void,
        }
    }
}

#[repr(C)]
struct Oid {
    length: u32,
    elements: *const c_void,
}

#[repr(C)]
struct OidSet {
    count: usize,
    elements: *const Oid,
}

#[repr(C)]
struct KeyValue {
    key: *const std::ffi::c_char,
    value: *const std::ffi::c_char,
}

#[repr(C)]
struct KeyValueSet {
    count: u32,
    elements: *const KeyValue,
}

// The OIDs, as DER content bytes (RFC 2743 / RFC 1964).
const NT_HOSTBASED_SERVICE: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x01\x04"; // 1.2.840.113554.1.2.1.4
const NT_KRB5_PRINCIPAL: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x01"; // 1.2.840.113554.1.2.2.1
const MECH_KRB5: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02"; // 1.2.840.113554.1.2.2

fn oid(der: &'static [u8]) -> Oid {
    Oid {
        length: der.len() as u32,
        elements: der.as_ptr() as *const c_void,
    }
}

const GSS_C_MUTUAL_FLAG: u32 = 2;
const GSS_C_SEQUENCE_FLAG: u32 = 8;
const GSS_C_CONF_FLAG: u32 = 16;
const GSS_C_INTEG_FLAG: u32 = 32;
const GSS_C_INITIATE: c_int = 1;
const GSS_C_GSS_CODE: c_int = 1;
const GSS_C_MECH_CODE: c_int = 2;
const GSS_S_CONTINUE_NEEDED: u32 = 1;
/// Calling and routine error bits (`GSS_ERROR()`).
const GSS_ERROR_MASK: u32 = 0xffff_0000;

type ImportName = unsafe extern "C" fn(Minor, *const Buffer, *const Oid, *mut Name) -> u32;
type ReleaseName = unsafe extern "C" fn(Minor, *mut Name) -> u32;
type AcquireCredFrom = unsafe extern "C" fn(
    Minor,
    Name,
    u32,
    *const OidSet,
    c_int,
    *const KeyValueSet,
    *mut Cred,
    *mut *mut c_void,
    *mut u32,
) -> u32;
type ReleaseCred = unsafe extern "C" fn(Minor, *mut Cred) -> u32;
type InitSecContext = unsafe extern "C" fn(
    Minor,
    Cred,
    *mut Ctx,
    Name,
    *const Oid,
    u32,
    u32,
    *const c_void,
    *const Buffer,
    *mut *mut Oid,
    *mut Buffer,
    *mut u32,
    *mut u32,
) -> u32;
type DeleteSecContext = unsafe extern "C" fn(Minor, *mut Ctx, *mut Buffer) -> u32;
type Wrap = unsafe extern "C" fn(Minor, Ctx, c_int, u32, *const Buffer, *mut c_int, *mut Buffer) -> u32;
type Unwrap = unsafe extern "C" fn(Minor, Ctx, *const Buffer, *mut Buffer, *mut c_int, *mut u32) -> u32;
type ReleaseBuffer = unsafe extern "C" fn(Minor, *mut Buffer) -> u32;
type DisplayStatus = unsafe extern "C" fn(Minor, u32, c_int, *const Oid, *mut u32, *mut Buffer) -> u32;

/// The loaded library and its functions; cheap to clone.
#[derive(Clone)]
pub struct Gss(Arc<Api>);

struct Api {
    import_name: ImportName,
    release_name: ReleaseName,
    acquire_cred_from: AcquireCredFrom,
    release_cred: ReleaseCred,
    init_sec_context: InitSecContext,
    delete_sec_context: DeleteSecContext,
    wrap: Wrap,
    unwrap: Unwrap,
    release_buffer: ReleaseBuffer,
    display_status: DisplayStatus,
    /// Kept loaded as long as any function pointer above may be called.
    _library: libloading::Library,
}

/// A failed GSSAPI call: the call, its major and minor status codes, and
/// their texts from `gss_display_status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GssError {
    pub call: &'static str,
    pub major: u32,
    pub minor: u32,
    pub text: String,
}

impl fmt::Display for GssError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {} (GSSAPI major 0x{:08x}, minor {})",
            self.call, self.text, self.major, self.minor
        )
    }
}

impl std::error::Error for GssError {}

/// Where the client's credentials come from (see `KerberosConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CredentialSource {
    /// Client principal; `None` = the keytab's or cache's default.
    pub principal: Option<String>,
    /// Client keytab: the library fetches (and re-fetches) tickets from it
    /// into `ccache`.
    pub keytab: Option<String>,
    /// Credential cache, e.g. `MEMORY:solus` or `FILE:/tmp/krb5cc_solus`;
    /// `None` = the library's default.
    pub ccache: Option<String>,
}

impl Gss {
    /// Loads `library` (a file name the dynamic loader searches for, or a
    /// path). Errors: the loader's message, or the first missing symbol.
    pub fn load(library: &str) -> Result<Gss, String> {
        // SAFETY: loading MIT's libgssapi_krb5 runs only its (thread-safe) ELF initialisers.
        let lib = unsafe { libloading::Library::new(library) }.map_err(|e| e.to_string())?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the type aliases above are the signatures in MIT's gssapi.h.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{library} has no {}: {e}", $name))?
            };
        }
        let api = Api {
            import_name: sym!("gss_import_name"),
            release_name: sym!("gss_release_name"),
            acquire_cred_from: sym!("gss_acquire_cred_from"),
            release_cred: sym!("gss_release_cred"),
            init_sec_context: sym!("gss_init_sec_context"),
            delete_sec_context: sym!("gss_delete_sec_context"),
            wrap: sym!("gss_wrap"),
            unwrap: sym!("gss_unwrap"),
            release_buffer: sym!("gss_release_buffer"),
            display_status: sym!("gss_display_status"),
            _library: lib,
        };
        Ok(Gss(Arc::new(api)))
    }

    /// The texts of a status code of one type, joined.
    fn status_text(&self, code: u32, kind: c_int) -> String {
        let mut parts = Vec::new();
        let mut context = 0u32;
        let mech = oid(MECH_KRB5);
        loop {
            let (mut minor, mut out) = (0u32, Buffer::empty());
            // SAFETY: valid pointers; `out` is released below.
            let major = unsafe { (self.0.display_status)(&mut minor, code, kind, &mech, &mut context, &mut out) };
            if major & GSS_ERROR_MASK != 0 {
                break;
            }
            parts.push(self.take(&mut out));
            if context == 0 || parts.len() > 8 {
                break;
            }
        }
        parts.retain(|p| !p.is_empty());
        parts.join("; ")
    }

    fn error(&self, call: &'static str, major: u32, minor: u32) -> GssError {
        let mut text = self.status_text(major, GSS_C_GSS_CODE);
        if minor != 0 {
            let m = self.status_text(minor, GSS_C_MECH_CODE);
            if !m.is_empty() {
                text = format!("{text}: {m}");
            }
        }
        GssError {
            call,
            major,
            minor,
            text,
        }
    }

    /// Copies a library-owned buffer's bytes and releases it.
    fn take_bytes(&self, b: &mut Buffer) -> Vec<u8> {
        let bytes = if b.value.is_null() || b.length == 0 {
            Vec::new()
        } else {
            // SAFETY: the library filled `b` with `length` readable bytes.
            unsafe { std::slice::from_raw_parts(b.value as *const u8, b.length) }.to_vec()
        };
        let mut minor = 0;
        // SAFETY: `b` came from the library (or is empty).
        unsafe { (self.0.release_buffer)(&mut minor, b) };
        bytes
    }

    fn take(&self, b: &mut Buffer) -> String {
        String::from_utf8_lossy(&self.take_bytes(b))
            .trim_end_matches('\0')
            .to_string()
    }

    fn import(&self, text: &str, kind: &'static [u8]) -> Result<OwnedName, GssError> {
        let (mut minor, mut name) = (0u32, ptr::null_mut());
        let kind = oid(kind);
        // SAFETY: valid pointers; the name is released by OwnedName's drop.
        let major = unsafe { (self.0.import_name)(&mut minor, &Buffer::of(text.as_bytes()), &kind, &mut name) };
        if major & GSS_ERROR_MASK != 0 {
            return Err(self.error("gss_import_name", major, minor));
        }
        Ok(OwnedName {
            gss: self.clone(),
            name,
        })
    }

    /// Acquires initiator credentials from `source` (`gss_acquire_cred_from`).
    /// With a client keytab MIT gets a new ticket whenever the cached one
    /// has expired, so credentials renew themselves.
    pub fn credential(&self, source: &CredentialSource) -> Result<Credential, GssError> {
        let name = match &source.principal {
            Some(p) => Some(self.import(p, NT_KRB5_PRINCIPAL)?),
            None => None,
        };
        let cstr = |s: &str| CString::new(s).unwrap_or_default();
        let mut owned = Vec::new();
        if let Some(k) = &source.keytab {
            owned.push((cstr("client_keytab"), cstr(k)));
        }
        if let Some(c) = &source.ccache {
            owned.push((cstr("ccache"), cstr(c)));
        }
        let elements: Vec<KeyValue> = owned
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.as_ptr(),
                value: v.as_ptr(),
            })
            .collect();
        let store = KeyValueSet {
            count: elements.len() as u32,
            elements: elements.as_ptr(),
        };
        let mech = oid(MECH_KRB5);
        let mechs = OidSet {
            count: 1,
            elements: &mech,
        };
        let (mut minor, mut cred) = (0u32, ptr::null_mut());
        // SAFETY: every pointer is valid for the call; the credential is
        // released by Credential's drop.
        let major = unsafe {
            (self.0.acquire_cred_from)(
                &mut minor,
                name.as_ref().map_or(ptr::null_mut(), |n| n.name),
                0,
                &mechs,
                GSS_C_INITIATE,
                if elements.is_empty() { ptr::null() } else { &store },
                &mut cred,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if major & GSS_ERROR_MASK != 0 {
            return Err(self.error("gss_acquire_cred_from", major, minor));
        }
        Ok(Credential(Arc::new(CredInner {
            gss: self.clone(),
            cred,
        })))
    }

    /// A client context for the service `service@host` (the Kerberos
    /// principal `service/host@REALM`), asking for mutual authentication,
    /// integrity and confidentiality (the SASL layer then picks one).
    pub fn context(&self, credential: &Credential, service: &str, host: &str) -> Result<Context, GssError> {
        let target = self.import(&format!("{service}@{host}"), NT_HOSTBASED_SERVICE)?;
        Ok(Context {
            gss: self.clone(),
            credential: credential.0.clone(),
            target,
            ctx: ptr::null_mut(),
            established: false,
        })
    }
}

struct OwnedName {
    gss: Gss,
    name: Name,
}

impl Drop for OwnedName {
    fn drop(&mut self) {
        let mut minor = 0;
        // SAFETY: `name` came from gss_import_name and is released once.
        unsafe { (self.gss.0.release_name)(&mut minor, &mut self.name) };
    }
}

/// Initiator credentials; released when the last holder (this, or a
/// context made with it) drops.
#[derive(Clone)]
pub struct Credential(Arc<CredInner>);

struct CredInner {
    gss: Gss,
    cred: Cred,
}

impl Drop for CredInner {
    fn drop(&mut self) {
        let mut minor = 0;
        // SAFETY: `cred` came from gss_acquire_cred_from and is released once.
        unsafe { (self.gss.0.release_cred)(&mut minor, &mut self.cred) };
    }
}

/// One client security context. Used by one thread at a time (the pool's
/// connection owns it); MIT contexts may move between threads.
pub struct Context {
    gss: Gss,
    credential: Arc<CredInner>,
    target: OwnedName,
    ctx: Ctx,
    established: bool,
}

// SAFETY: MIT's GSSAPI handles are plain heap objects with no thread
// affinity; a Context is only ever used through `&mut` (one thread at a time).
// MIT locks a credential internally (it refreshes tickets in place), so
// one may be shared by contexts on several threads.
unsafe impl Send for Context {}
unsafe impl Send for CredInner {}
unsafe impl Sync for CredInner {}
unsafe impl Send for OwnedName {}

impl Context {
    /// One `gss_init_sec_context` step: `input` is the server's last token
    /// (empty at first). Returns the token to send (maybe empty).
    pub fn step(&mut self, input: &[u8]) -> Result<Vec<u8>, GssError> {
        let mech = oid(MECH_KRB5);
        let (mut minor, mut out, mut flags) = (0u32, Buffer::empty(), 0u32);
        let input = Buffer::of(input);
        // SAFETY: valid pointers; `ctx` is ours; `out` is taken below.
        let major = unsafe {
            (self.gss.0.init_sec_context)(
                &mut minor,
                self.credential.cred,
                &mut self.ctx,
                self.target.name,
                &mech,
                GSS_C_MUTUAL_FLAG | GSS_C_SEQUENCE_FLAG | GSS_C_INTEG_FLAG | GSS_C_CONF_FLAG,
                0,
                ptr::null(),
                if input.length == 0 { ptr::null() } else { &input },
                ptr::null_mut(),
                &mut out,
                &mut flags,
                ptr::null_mut(),
            )
        };
        let token = self.gss.take_bytes(&mut out);
        if major & GSS_ERROR_MASK != 0 {
            return Err(self.gss.error("gss_init_sec_context", major, minor));
        }
        self.established = major & GSS_S_CONTINUE_NEEDED == 0;
        Ok(token)
    }

    /// Whether the context is established (mutual authentication done).
    pub fn established(&self) -> bool {
        self.established
    }

    /// `gss_wrap`: integrity-protected, and encrypted when `confidential`.
    pub fn wrap(&mut self, data: &[u8], confidential: bool) -> Result<Vec<u8>, GssError> {
        let (mut minor, mut out, mut conf_state) = (0u32, Buffer::empty(), 0);
        // SAFETY: valid pointers; `out` is taken below.
        let major = unsafe {
            (self.gss.0.wrap)(
                &mut minor,
                self.ctx,
                confidential as c_int,
                0,
                &Buffer::of(data),
                &mut conf_state,
                &mut out,
            )
        };
        let bytes = self.gss.take_bytes(&mut out);
        if major & GSS_ERROR_MASK != 0 {
            return Err(self.gss.error("gss_wrap", major, minor));
        }
        if confidential && conf_state == 0 {
            return Err(GssError {
                call: "gss_wrap",
                major,
                minor,
                text: "confidentiality was asked for but not applied".into(),
            });
        }
        Ok(bytes)
    }

    /// `gss_unwrap`; also returns whether the message was encrypted.
    pub fn unwrap(&mut self, data: &[u8]) -> Result<(Vec<u8>, bool), GssError> {
        let (mut minor, mut out, mut conf_state, mut qop) = (0u32, Buffer::empty(), 0, 0u32);
        // SAFETY: valid pointers; `out` is taken below.
        let major = unsafe {
            (self.gss.0.unwrap)(
                &mut minor,
                self.ctx,
                &Buffer::of(data),
                &mut out,
                &mut conf_state,
                &mut qop,
            )
        };
        let bytes = self.gss.take_bytes(&mut out);
        if major & GSS_ERROR_MASK != 0 {
            return Err(self.gss.error("gss_unwrap", major, minor));
        }
        Ok((bytes, conf_state != 0))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if !self.ctx.is_null() {
            let mut minor = 0;
            // SAFETY: `ctx` came from gss_init_sec_context and is deleted once.
            unsafe { (self.gss.0.delete_sec_context)(&mut minor, &mut self.ctx, ptr::null_mut()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_named() {
        let e = Gss::load("/nonexistent/libgssapi_krb5.so.2").err().unwrap();
        assert!(e.contains("/nonexistent/libgssapi_krb5.so.2"), "{e}");
    }

    #[test]
    fn status_texts_come_from_the_library_when_it_is_installed() {
        let Ok(gss) = Gss::load("libgssapi_krb5.so.2") else {
            eprintln!("skipped: no libgssapi_krb5.so.2 here");
            return;
        };
        // GSS_S_NO_CRED (7 << 16), as gss_display_status words it.
        let e = gss.error("gss_acquire_cred_from", 7 << 16, 0);
        assert!(e.text.contains("No credentials were supplied"), "{e}");
        assert!(e.to_string().contains("major 0x00070000"), "{e}");
    }
}
