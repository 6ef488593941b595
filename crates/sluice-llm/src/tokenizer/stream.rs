//! Ids to text as they are generated, one complete UTF-8 character at a time.

use super::Tokenizer;
use crate::error::Result;

/// Turns token ids into text as they come: a character split over several byte tokens
/// is held back until it is complete; bytes that can never form UTF-8 become U+FFFD.
/// The text is what [`Tokenizer::decode`] gives before its space cleaning.
pub struct StreamDecoder<'t> {
    tok: &'t Tokenizer,
    skip_special: bool,
    pending: Vec<u8>,
    first: bool,
    text: String,
}

impl<'t> StreamDecoder<'t> {
    /// A decoder; `skip_special` drops control tokens as `decode` does.
    pub fn new(tok: &'t Tokenizer, skip_special: bool) -> Self {
        StreamDecoder {
            tok,
            skip_special,
            pending: Vec::new(),
            first: true,
            text: String::new(),
        }
    }

    /// A decoder for tokens that continue text already shown (generated tokens after a
    /// prompt): the first token keeps its leading space.
    pub fn continuation(tok: &'t Tokenizer, skip_special: bool) -> Self {
        let mut d = Self::new(tok, skip_special);
        d.first = false;
        d
    }

    /// Adds `id`; returns the text that became complete (often empty or one token's text).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.tok.check_ids(&[id])?;
        let mut p = self.tok.piece_bytes(id, !self.skip_special);
        if self.first {
            self.first = false;
            // Like decode: the space the tokenizer put before the first word goes, unless
            // the first token is a BOS.
            let bos_first = self.skip_special && self.tok.add_bos && Some(id) == self.tok.bos;
            if self.tok.add_space_prefix && !bos_first && p.first() == Some(&b' ') {
                p = &p[1..];
            }
        }
        self.pending.extend_from_slice(p);
        let out = take_valid(&mut self.pending, false);
        self.text.push_str(&out);
        Ok(out)
    }

    /// Everything still held back (an incomplete character becomes U+FFFD).
    pub fn flush(&mut self) -> String {
        let out = take_valid(&mut self.pending, true);
        self.text.push_str(&out);
        out
    }

    /// All text returned so far.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Takes the longest prefix of `buf` that is complete UTF-8 (invalid bytes as U+FFFD);
/// an incomplete character at the end stays unless `end`.
fn take_valid(buf: &mut Vec<u8>, end: bool) -> String {
    let mut out = String::new();
    let mut at = 0;
    loop {
        match std::str::from_utf8(&buf[at..]) {
            Ok(s) => {
                out.push_str(s);
                at = buf.len();
                break;
            }
            Err(e) => {
                let good = e.valid_up_to();
                // Checked by from_utf8 just now.
                out.push_str(std::str::from_utf8(&buf[at..at + good]).unwrap_or_default());
                at += good;
                match e.error_len() {
                    Some(n) => {
                        out.push('\u{FFFD}');
                        at += n;
                    }
                    None => {
                        if end {
                            out.push('\u{FFFD}');
                            at = buf.len();
                        }
                        break;
                    }
                }
            }
        }
    }
    buf.drain(..at);
    out
}

#[cfg(test)]
mod tests {
    use super::take_valid;

    #[test]
    fn holds_back_incomplete_characters() {
        let mut b = "é".as_bytes()[..1].to_vec();
        assert_eq!(take_valid(&mut b, false), "");
        b.push("é".as_bytes()[1]);
        b.extend_from_slice(b"x");
        assert_eq!(take_valid(&mut b, false), "éx");
        assert!(b.is_empty());
        // A byte that can never start a character is replaced at once.
        let mut b = vec![b'a', 0xFF, b'b', 0xE2, 0x82];
        assert_eq!(take_valid(&mut b, false), "a\u{FFFD}b");
        assert_eq!(b, vec![0xE2, 0x82]);
        assert_eq!(take_valid(&mut b, true), "\u{FFFD}");
    }
}
