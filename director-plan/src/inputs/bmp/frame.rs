//! BMP framing: TCP hands over arbitrary chunks; the collector wants whole messages.
//!
//! Every BMP message (RFC 7854 §4.1) starts with a 6-byte common header: version (3), a
//! 32-bit length that includes the header, and the type. bgpkit-parser's `parse_bmp_msg`
//! reads one message from a buffer but does not wait for the rest of one split across reads,
//! so the framer buffers until a whole message is there.

use anyhow::{bail, Result};

/// The common header's size, and so the smallest message.
pub const HEADER_LEN: usize = 6;

/// The largest message accepted: 1 MiB. A route-monitoring message carries one BGP message,
/// at most 65,535 bytes even with extended messages (RFC 8654), plus 48 bytes of headers; a
/// peer-up carries two OPENs and a few TLVs, an initiation a few TLVs. 1 MiB is 16 times the
/// largest real message, so a length above it means the stream has lost its framing (or the
/// other end is not a BMP speaker), and it keeps a broken length from making us buffer up to
/// 4 GiB per connection before noticing.
pub const MAX_MESSAGE_LEN: usize = 1 << 20;

/// Splits a byte stream into BMP messages. After a bad header it stays broken: the stream
/// cannot be resynchronised, the session must be dropped.
#[derive(Debug, Default)]
pub struct Framer {
    buf: Vec<u8>,
    /// Where the first unread message starts in `buf`.
    start: usize,
    broken: Option<String>,
}

impl Framer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a chunk as read from the socket.
    pub fn push(&mut self, chunk: &[u8]) {
        // Drop what was handed out before, so the buffer holds at most one partial message
        // plus the new chunk.
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole message (common header included), `None` until more bytes arrive, or
    /// an error if the stream is not BMP version 3 with a sane length.
    pub fn next_message(&mut self) -> Result<Option<&[u8]>> {
        if let Some(why) = &self.broken {
            bail!("{why}");
        }
        let rest = &self.buf[self.start..];
        if rest.len() < HEADER_LEN {
            return Ok(None);
        }
        let version = rest[0];
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let problem = if version != 3 {
            Some(format!(
                "not BMP version 3: version byte {version} at stream offset {}",
                self.start
            ))
        } else if !(HEADER_LEN..=MAX_MESSAGE_LEN).contains(&len) {
            Some(format!(
                "BMP message length {len} outside {HEADER_LEN}..={MAX_MESSAGE_LEN}"
            ))
        } else {
            None
        };
        if let Some(why) = problem {
            self.broken = Some(why.clone());
            bail!("{why}");
        }
        if rest.len() < len {
            return Ok(None);
        }
        let at = self.start;
        self.start += len;
        Ok(Some(&self.buf[at..at + len]))
    }

    /// Bytes buffered and not yet handed out (a partial message).
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }
}
