//! Bearer tokens: the service's token (from `--token-file`, or generated into the
//! state directory with mode 0600) and the per-job report tokens.

use crate::error::ServeError;
use rand::Rng;
use std::path::Path;

/// 32 random bytes from the OS-seeded generator, as 64 hex digits.
pub fn new_token() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Reads the token in `path`, or creates the file (mode 0600) with a new token when
/// it does not exist. A token must be 16 to 256 printable ASCII characters; an existing
/// file must be a regular file of this user with mode 0600 ([`crate::trust::open_token`]).
pub fn load_or_create(path: &Path) -> Result<String, ServeError> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    match crate::trust::open_token(path).map_err(ServeError::Exec)? {
        Some(f) => {
            let mut s = String::new();
            // A token is at most 256 characters: never read more than a little over that.
            f.take(4096)
                .read_to_string(&mut s)
                .map_err(|e| ServeError::io(format!("reading token file {}", path.display()), e))?;
            let t = s.trim();
            if t.len() < 16 || t.len() > 256 || !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ServeError::Exec(format!(
                    "token file {}: expected one token of 16 to 256 printable ASCII characters",
                    path.display()
                )));
            }
            Ok(t.to_string())
        }
        None => {
            let t = new_token();
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| {
                    ServeError::io(format!("creating token file {}", path.display()), e)
                })?;
            writeln!(f, "{t}")
                .map_err(|e| ServeError::io(format!("writing {}", path.display()), e))?;
            f.sync_all()
                .map_err(|e| ServeError::io(format!("writing {}", path.display()), e))?;
            Ok(t)
        }
    }
}

/// Compares in time independent of where the strings differ.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The token of an `Authorization: Bearer …` header value.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    header?.strip_prefix("Bearer ").map(str::trim)
}

/// Name of the dashboard's session cookie.
pub const SESSION_COOKIE: &str = "pacer_session";

/// The session cookie's value for service token `token`: SHA-256 of a fixed label and
/// the token, in hex. Derived, so the cookie is not the token itself (the token cannot
/// be read back from a cookie), and valid exactly as long as the token is.
pub fn session_value(token: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"pacer-serve dashboard session\0");
    h.update(token.as_bytes());
    h.finalize().iter().map(|x| format!("{x:02x}")).collect()
}

/// Header in which the dashboard sends its CSRF token on every request.
pub const CSRF_HEADER: &str = "x-pacer-csrf";

/// The dashboard's CSRF token for service token `token`: SHA-256 of another fixed label
/// and the token, in hex. The dashboard page (served only to an authenticated browser)
/// carries it; a page of another origin cannot read that page, so it cannot send the
/// header, even when the browser attaches the session cookie to its requests.
pub fn csrf_value(token: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"pacer-serve dashboard csrf\0");
    h.update(token.as_bytes());
    h.finalize().iter().map(|x| format!("{x:02x}")).collect()
}

/// The value of cookie `name` among `Cookie` header values (the first one named so).
pub fn cookie<'a>(headers: impl IntoIterator<Item = &'a str>, name: &str) -> Option<&'a str> {
    headers
        .into_iter()
        .flat_map(|h| h.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_cookies_are_derived_and_parsed() {
        let a = session_value("0123456789abcdef");
        assert_eq!(a.len(), 64);
        assert_ne!(a, session_value("0123456789abcdeg"));
        assert!(!a.contains("0123456789abcdef"));
        let h = [
            "theme=dark; pacer_session=abc ; x=1",
            "pacer_session=second",
        ];
        assert_eq!(cookie(h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(["pacer_sessionx=1"], SESSION_COOKIE), None);
        assert_eq!(cookie([], SESSION_COOKIE), None);
        let c = csrf_value("0123456789abcdef");
        assert_eq!(c.len(), 64);
        assert_ne!(c, a, "the CSRF token is not the session cookie");
        assert_ne!(c, csrf_value("0123456789abcdeg"));
    }
}
