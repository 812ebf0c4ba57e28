//! Bounding text that reaches users, logs or headers (HBase error messages,
//! gRPC status messages), so one long message cannot outgrow its carrier.

/// `text` cut to at most `max` bytes at a char boundary, "..." marking a
/// cut (so the result is at most `max + 3` bytes).
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    // `str::floor_char_boundary` is newer than the MSRV.
    let end = (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_at_a_char_boundary_and_marks_the_cut() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcd", 3), "abc...");
        assert_eq!(truncate("aé", 2), "a...");
    }
}
