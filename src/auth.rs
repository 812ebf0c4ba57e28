//! Bearer-token authentication and per-client authorisation, free of gRPC:
//! `api` turns the answers into statuses.
//!
//! The tokens file (`auth.tokens_file`) has one `<token> <client_id>` pair a
//! line; `*` as the client makes an admin token (every client). Blank lines
//! and lines starting with `#` are skipped. Tokens are at least
//! [`MIN_TOKEN_LEN`] bytes and appear once. A token may act on its own
//! client's dedupers only, data and admin RPCs alike; an admin token on all.
//!
//! Tokens are kept as SHA-256 digests and a presented token is compared with
//! every stored digest in constant time, so neither the answer time nor any
//! log line tells anything about the stored tokens. No error message quotes a
//! token or a line of the file.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::deduper;

/// Shortest accepted token, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

/// The client id that marks an admin token in the tokens file.
pub const ADMIN: &str = "*";

/// Who a token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// An admin token: every client's dedupers.
    Admin,
    /// A client's token: that client's dedupers only.
    Client(String),
    /// Authentication is off: everything is allowed.
    Anonymous,
}

impl Principal {
    /// Whether this principal may act on `client_id`'s dedupers.
    pub fn may_access(&self, client_id: &str) -> bool {
        match self {
            Principal::Admin | Principal::Anonymous => true,
            Principal::Client(own) => own == client_id,
        }
    }
}

/// Why a request could not be authenticated (`api` answers `UNAUTHENTICATED`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing `authorization: Bearer <token>` metadata")]
    Missing,
    #[error("malformed authorization metadata; expected `Bearer <token>`")]
    Malformed,
    #[error("unknown bearer token")]
    Unknown,
}

/// Why a tokens file was refused. Never quotes a token.
#[derive(Debug, thiserror::Error)]
pub enum TokensFileError {
    #[error("reading tokens file {path} (auth.tokens_file): {error}")]
    Read { path: PathBuf, error: std::io::Error },
    #[error("tokens file {path} (auth.tokens_file), line {line}: {problem}")]
    Line {
        path: PathBuf,
        line: usize,
        problem: String,
    },
    #[error("tokens file {path} (auth.tokens_file) holds no token; add `<token> <client_id>` lines")]
    Empty { path: PathBuf },
}

struct Entry {
    digest: [u8; 32],
    principal: Principal,
}

/// A parsed tokens file.
pub struct Tokens {
    entries: Vec<Entry>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokens").field("count", &self.entries.len()).finish()
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl Tokens {
    /// Parses the text of a tokens file; `path` only names it in errors.
    /// Errors: a line without exactly a token and a client id, a token
    /// shorter than [`MIN_TOKEN_LEN`], a client id that is neither `*` nor a
    /// valid client id, a repeated token, or no token at all.
    pub fn parse(path: &Path, text: &str) -> Result<Tokens, TokensFileError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            let bad = |problem: String| TokensFileError::Line {
                path: path.to_path_buf(),
                line: line_no,
                problem,
            };
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = trimmed.split_whitespace().collect();
            let [token, client] = fields[..] else {
                return Err(bad(format!(
                    "expected `<token> <client_id>`, found {} fields",
                    fields.len()
                )));
            };
            if token.len() < MIN_TOKEN_LEN {
                return Err(bad(format!(
                    "token is {} bytes; tokens must be at least {MIN_TOKEN_LEN}",
                    token.len()
                )));
            }
            let principal = if client == ADMIN {
                Principal::Admin
            } else {
                deduper::validate_name("client_id", client).map_err(|e| bad(e.to_string()))?;
                Principal::Client(client.to_string())
            };
            let digest = digest(token.as_bytes());
            if entries.iter().any(|e| e.digest == digest) {
                return Err(bad("token repeats an earlier line".into()));
            }
            entries.push(Entry { digest, principal });
        }
        if entries.is_empty() {
            return Err(TokensFileError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(Tokens { entries })
    }

    /// Reads and parses a tokens file (see [`Tokens::parse`]).
    pub fn load(path: &Path) -> Result<Tokens, TokensFileError> {
        let text = std::fs::read_to_string(path).map_err(|error| TokensFileError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        Tokens::parse(path, &text)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The principal of `token`, comparing its digest with every stored one
    /// in constant time (the loop never stops early).
    pub fn lookup(&self, token: &str) -> Option<Principal> {
        let presented = digest(token.as_bytes());
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (i, e) in self.entries.iter().enumerate() {
            let same = e.digest.ct_eq(&presented);
            index = u64::conditional_select(&index, &(i as u64), same);
            found |= same;
        }
        bool::from(found).then(|| self.entries[index as usize].principal.clone())
    }
}

/// The authenticator a server uses: off, or on with a tokens file that can
/// be re-read (on SIGHUP) without a restart.
pub struct Authenticator {
    /// `None` when authentication is off.
    source: Option<(PathBuf, RwLock<Arc<Tokens>>)>,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            None => f.write_str("Authenticator(off)"),
            Some((path, tokens)) => {
                let n = tokens.read().unwrap_or_else(|p| p.into_inner()).len();
                write!(f, "Authenticator({}, {n} tokens)", path.display())
            }
        }
    }
}

/// `off`, or `on (<n> tokens from <file>)`, for the start-up log.
impl fmt::Display for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            None => f.write_str("off"),
            Some((path, tokens)) => {
                let n = tokens.read().unwrap_or_else(|p| p.into_inner()).len();
                write!(f, "on ({n} tokens from {})", path.display())
            }
        }
    }
}

impl Authenticator {
    /// Authentication off: every request is [`Principal::Anonymous`].
    pub fn disabled() -> Authenticator {
        Authenticator { source: None }
    }

    /// Authentication on, with the tokens of `path`; fails when the file
    /// cannot be read or parsed.
    pub fn from_file(path: &Path) -> Result<Authenticator, TokensFileError> {
        let tokens = Tokens::load(path)?;
        Ok(Authenticator {
            source: Some((path.to_path_buf(), RwLock::new(Arc::new(tokens)))),
        })
    }

    pub fn enabled(&self) -> bool {
        self.source.is_some()
    }

    /// Re-reads the tokens file. On success the new tokens replace the old
    /// ones and their count is returned; on error the old tokens stay.
    /// `Ok(0)` when authentication is off (nothing to read).
    pub fn reload(&self) -> Result<usize, TokensFileError> {
        let Some((path, current)) = &self.source else {
            return Ok(0);
        };
        let tokens = Tokens::load(path)?;
        let n = tokens.len();
        *current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(tokens);
        Ok(n)
    }

    /// The principal of an `authorization` metadata value (`Bearer <token>`,
    /// scheme case-insensitive), or why there is none.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, AuthError> {
        let Some((_, current)) = &self.source else {
            return Ok(Principal::Anonymous);
        };
        let value = authorization.ok_or(AuthError::Missing)?.trim();
        let (scheme, token) = value.split_once(' ').ok_or(AuthError::Malformed)?;
        let token = token.trim();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return Err(AuthError::Malformed);
        }
        let tokens = current.read().unwrap_or_else(|p| p.into_inner()).clone();
        tokens.lookup(token).ok_or(AuthError::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "token-of-client-a-0123456789";
    const B: &str = "token-of-client-b-0123456789";
    const ROOT: &str = "admin-token-0123456789abcdef";

    fn file() -> String {
        format!("# tokens\n\n{A} client-a\n  {B}\tclient-b  \n# admin\n{ROOT} *\n")
    }

    #[test]
    fn parses_pairs_comments_and_blank_lines() {
        let t = Tokens::parse(Path::new("t"), &file()).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.lookup(A), Some(Principal::Client("client-a".into())));
        assert_eq!(t.lookup(B), Some(Principal::Client("client-b".into())));
        assert_eq!(t.lookup(ROOT), Some(Principal::Admin));
        assert_eq!(
            t.lookup("token-of-client-a-012345678"),
            None,
            "a prefix is not the token"
        );
        assert_eq!(t.lookup(&format!("{A}x")), None);
        assert_eq!(t.lookup(""), None);
    }

    #[test]
    fn refuses_bad_files_without_quoting_tokens() {
        let secret = "very-secret-token-value-42";
        let cases = [
            (format!("{secret}\n"), "line 1", "1 fields"),
            (format!("{secret} a b\n"), "line 1", "3 fields"),
            ("short c\n".to_string(), "line 1", "at least 16"),
            (format!("# x\n{secret} bad|client\n"), "line 2", "client_id"),
            (format!("{secret} a\n{secret} b\n"), "line 2", "repeats"),
            ("# only comments\n\n".to_string(), "no token", ""),
        ];
        for (text, at, what) in cases {
            let e = Tokens::parse(Path::new("tokens.txt"), &text).unwrap_err().to_string();
            assert!(e.contains("tokens.txt") && e.contains(at) && e.contains(what), "{e}");
            assert!(!e.contains(secret), "error quotes the token: {e}");
        }
    }

    #[test]
    fn principals_reach_only_their_client() {
        assert!(Principal::Admin.may_access("x"));
        assert!(Principal::Anonymous.may_access("x"));
        assert!(Principal::Client("a".into()).may_access("a"));
        assert!(!Principal::Client("a".into()).may_access("b"));
        assert!(!Principal::Client("a".into()).may_access("a "));
    }

    #[test]
    fn authenticates_bearer_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, file()).unwrap();
        let auth = Authenticator::from_file(&path).unwrap();
        assert!(auth.enabled());
        assert_eq!(auth.authenticate(None), Err(AuthError::Missing));
        assert_eq!(auth.authenticate(Some(A)), Err(AuthError::Malformed));
        assert_eq!(
            auth.authenticate(Some(&format!("Basic {A}"))),
            Err(AuthError::Malformed)
        );
        assert_eq!(auth.authenticate(Some("Bearer ")), Err(AuthError::Malformed));
        assert_eq!(
            auth.authenticate(Some("Bearer nope-nope-nope-nope")),
            Err(AuthError::Unknown)
        );
        assert_eq!(
            auth.authenticate(Some(&format!("Bearer {A}"))),
            Ok(Principal::Client("client-a".into()))
        );
        assert_eq!(
            auth.authenticate(Some(&format!("bearer  {ROOT}"))),
            Ok(Principal::Admin)
        );
        assert_eq!(Authenticator::disabled().authenticate(None), Ok(Principal::Anonymous));
    }

    #[test]
    fn reload_swaps_tokens_and_keeps_them_on_a_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, format!("{A} client-a\n")).unwrap();
        let auth = Authenticator::from_file(&path).unwrap();
        let bearer = |t: &str| format!("Bearer {t}");
        assert!(auth.authenticate(Some(&bearer(A))).is_ok());

        std::fs::write(&path, format!("{B} client-b\n{ROOT} *\n")).unwrap();
        assert_eq!(auth.reload().unwrap(), 2);
        assert_eq!(auth.authenticate(Some(&bearer(A))), Err(AuthError::Unknown), "revoked");
        assert!(auth.authenticate(Some(&bearer(B))).is_ok());

        std::fs::write(&path, "broken\n").unwrap();
        assert!(auth.reload().is_err());
        assert!(auth.authenticate(Some(&bearer(B))).is_ok(), "old tokens kept");
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(auth.reload(), Err(TokensFileError::Read { .. })));
        assert!(auth.authenticate(Some(&bearer(ROOT))).is_ok(), "old tokens kept");
    }
}
