//! PURE: the tokenizer under the review parser and the canonical writer: whitespace, strings,
//! numbers and the walk over an object's or array's elements, each checked as `serde_json`
//! checks it. It builds nothing and knows neither Kubernetes nor RFC 8785; it only records, for
//! the canonical judge, whether it skipped whitespace and how much work strings' escapes need.

use std::borrow::Cow;

use serde_json::Number;

/// Nesting deeper than this is refused (as `serde_json` does at 128), so no input can exhaust
/// the stack of a parser, a hasher or a destructor that recurse.
pub const MAX_DEPTH: usize = 128;

/// What the tokenizer does not take; the caller falls back to `serde_json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

/// What escapes a string held, from least to most work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Escapes {
    None,
    /// Only escapes RFC 8785 writes the same way: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`,
    /// `\t`. Such a string is its own canonical form.
    Short,
    /// A `\/` too, which canonical JSON writes as a plain `/`.
    Solidus,
    /// A `\u` escape too, whose digits and surrogate pairs only decoding checks.
    Unicode,
}

/// The bytes of an eight-byte word that are escaped: each follows an odd-length run of
/// backslashes. Bit `i` of `backslashes` is set for a `\` at byte `i`; `carry` says whether the
/// word's first byte is escaped, and is set for the next word. Branch-free, after simdjson:
/// subtracting the runs' starts from their shifted bits flips the escaped byte of each odd run.
pub(crate) fn escaped_bytes(backslashes: u8, carry: &mut bool) -> u8 {
    const ODD: u8 = 0xaa;
    let carried = u8::from(*carry);
    // A backslash that is itself escaped starts no escape.
    let starts = backslashes & !carried;
    let codes = (((starts << 1) | ODD).wrapping_sub(starts)) ^ ODD;
    *carry = (codes & backslashes) & 0x80 != 0;
    codes ^ (backslashes | carried)
}

/// A cursor over JSON text.
pub(crate) struct Lexer<'a> {
    pub(crate) text: &'a str,
    pub(crate) at: usize,
    /// The canonical judge's verdict on the text since it last set this (see
    /// [`super::canonical`]); skipping whitespace clears it.
    pub(crate) canonical: bool,
    /// The most work any string's escapes needed since the caller last reset it.
    pub(crate) escapes: Escapes,
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Self {
            text,
            at: 0,
            canonical: true,
            escapes: Escapes::None,
        }
    }

    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    pub(crate) fn space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
            self.canonical = false;
        }
    }

    /// Whether only whitespace is left.
    pub(crate) fn at_end(&mut self) -> bool {
        self.space();
        self.at == self.text.len()
    }

    pub(crate) fn eat(&mut self, byte: u8) -> Result<(), Refused> {
        self.space();
        match self.peek() == Some(byte) {
            true => {
                self.at += 1;
                Ok(())
            }
            false => Err(Refused),
        }
    }

    /// [`elements`] over this lexer.
    pub(crate) fn elements(
        &mut self,
        element: impl FnMut(&mut Self, Option<Cow<'a, str>>) -> Result<(), Refused>,
    ) -> Result<(), Refused> {
        elements(self, element)
    }

    /// Move past `word` (`true`, `false`, `null`), which must be under the cursor.
    pub(crate) fn literal(&mut self, word: &str) -> Result<(), Refused> {
        match self.text[self.at..].starts_with(word) {
            true => {
                self.at += word.len();
                Ok(())
            }
            false => Err(Refused),
        }
    }

    /// A string: borrowed when it holds no escape, else decoded by `serde_json`.
    pub(crate) fn string(&mut self) -> Result<Cow<'a, str>, Refused> {
        let open = self.at;
        match self.skip_string()? {
            Escapes::None => Ok(Cow::Borrowed(&self.text[open + 1..self.at - 1])),
            Escapes::Short | Escapes::Solidus | Escapes::Unicode => {
                self.decode(open).map(Cow::Owned)
            }
        }
    }

    /// The string from the quote at `open` to the cursor, its escapes decoded (and so checked,
    /// digits and surrogate pairs of `\u` escapes included) by `serde_json`.
    pub(crate) fn decode(&self, open: usize) -> Result<String, Refused> {
        serde_json::from_str(&self.text[open..self.at]).map_err(|_| Refused)
    }

    /// Move past the string that starts at the quote under the cursor, checking it; what escapes
    /// it held. Eight bytes at a time and without a branch per escape: a
    /// `last-applied-configuration` annotation has an escape every few bytes.
    pub(crate) fn skip_string(&mut self) -> Result<Escapes, Refused> {
        let bytes = self.bytes();
        let mut at = self.at + 1;
        let mut escapes = Escapes::None;
        // Whether the first byte of the next word is escaped (a backslash ended this one).
        let mut carry = false;
        let close = loop {
            if at >= bytes.len() {
                return Err(Refused);
            }
            let high = string_bytes_high(word_at(&bytes[at..]));
            if !carry {
                // The usual word: no backslash, so the first special byte decides.
                let [quotes, backslashes, controls] = high;
                if backslashes == 0 {
                    let stops = quotes | controls;
                    if stops == 0 {
                        at += 8;
                        continue;
                    }
                    let pos = at + stops.trailing_zeros() as usize / 8;
                    match bytes.get(pos) {
                        Some(b'"') => break pos,
                        _ => return Err(Refused), // a raw control character
                    }
                }
            }
            let [quotes, backslashes, controls] = high.map(byte_mask);
            let escaped = escaped_bytes(backslashes, &mut carry);
            let ends = quotes & !escaped;
            // The bytes before the closing quote: all of the word if the quote is not in it.
            let inside = (ends & ends.wrapping_neg()).wrapping_sub(1);
            if controls & inside != 0 {
                return Err(Refused); // a raw control character
            }
            let escaped = escaped & inside;
            if escaped != 0 {
                escapes = escapes.max(Escapes::Short);
                // `\"` and `\\` need no check; the other escaped bytes are checked one by one.
                let mut others = escaped & !(quotes | backslashes);
                while others != 0 {
                    let pos = at + others.trailing_zeros() as usize;
                    others &= others - 1;
                    match bytes.get(pos) {
                        Some(b'b' | b'f' | b'n' | b'r' | b't') => {}
                        Some(b'/') => escapes = escapes.max(Escapes::Solidus),
                        Some(b'u') => escapes = Escapes::Unicode,
                        _ => return Err(Refused),
                    }
                }
            }
            if ends != 0 {
                break at + ends.trailing_zeros() as usize;
            }
            at += 8;
        };
        self.at = close + 1;
        self.escapes = self.escapes.max(escapes);
        Ok(escapes)
    }

    /// A number, as `serde_json` reads it: integers that fit as integers, the rest as doubles.
    pub(crate) fn number(&mut self) -> Result<Number, Refused> {
        let start = self.at;
        let bytes = self.bytes();
        let mut at = start;
        let digits = |at: &mut usize| {
            let from = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at - from
        };
        let negative = bytes.get(at) == Some(&b'-');
        at += usize::from(negative);
        let int_start = at;
        match digits(&mut at) {
            0 => return Err(Refused),
            n if n > 1 && bytes[int_start] == b'0' => return Err(Refused),
            _ => {}
        }
        let mut integer = true;
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            integer = false;
            if digits(&mut at) == 0 {
                return Err(Refused);
            }
        }
        if let Some(b'e' | b'E') = bytes.get(at) {
            at += 1;
            integer = false;
            if let Some(b'+' | b'-') = bytes.get(at) {
                at += 1;
            }
            if digits(&mut at) == 0 {
                return Err(Refused);
            }
        }
        self.at = at;
        let token = &self.text[start..at];
        if integer {
            match negative {
                // `-0` is the double -0.0, as serde_json reads it.
                true => match token.parse::<i64>() {
                    Ok(0) | Err(_) => {}
                    Ok(n) => return Ok(n.into()),
                },
                false => {
                    if let Ok(n) = token.parse::<u64>() {
                        return Ok(n.into());
                    }
                }
            }
        }
        let float: f64 = token.parse().map_err(|_| Refused)?;
        Number::from_f64(float).ok_or(Refused)
    }
}

/// Something that reads through a [`Lexer`]: a lexer, or a parser around one.
pub(crate) trait Reads<'a> {
    fn lx(&mut self) -> &mut Lexer<'a>;
}

impl<'a> Reads<'a> for Lexer<'a> {
    fn lx(&mut self) -> &mut Lexer<'a> {
        self
    }
}

/// Walk the object or array whose `{` or `[` is under the cursor of `r`, up to its closing
/// byte: `element` reads each value, given its member name in an object.
pub(crate) fn elements<'a, R: Reads<'a>>(
    r: &mut R,
    mut element: impl FnMut(&mut R, Option<Cow<'a, str>>) -> Result<(), Refused>,
) -> Result<(), Refused> {
    let object = r.lx().peek() == Some(b'{');
    let close = if object { b'}' } else { b']' };
    r.lx().at += 1;
    r.lx().space();
    if r.lx().peek() == Some(close) {
        r.lx().at += 1;
        return Ok(());
    }
    loop {
        let key = match object {
            true => {
                r.lx().space();
                if r.lx().peek() != Some(b'"') {
                    return Err(Refused);
                }
                let key = r.lx().string()?;
                r.lx().eat(b':')?;
                Some(key)
            }
            false => None,
        };
        element(r, key)?;
        r.lx().space();
        match r.lx().peek() {
            Some(b',') => r.lx().at += 1,
            Some(b) if b == close => {
                r.lx().at += 1;
                return Ok(());
            }
            _ => return Err(Refused),
        }
    }
}

/// The index of the first `"`, `\\` or control character in `bytes`: where a JSON string ends
/// or needs an escape. Eight bytes at a time, as most strings hold none.
pub(crate) fn find_special(bytes: &[u8]) -> Option<usize> {
    let mut words = bytes.chunks_exact(8);
    let mut offset = 0;
    for word in &mut words {
        let hits = special_bytes(word_at(word));
        if hits != 0 {
            return Some(offset + hits.trailing_zeros() as usize / 8);
        }
        offset += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| is_special(b))
        .map(|i| offset + i)
}

/// `"`, `\\` or a control character.
pub(crate) fn is_special(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// The first eight bytes as one little-endian word (a shorter slice is padded with spaces).
pub(crate) fn word_at(bytes: &[u8]) -> u64 {
    match bytes.first_chunk::<8>() {
        Some(word) => u64::from_le_bytes(*word),
        None => {
            let mut word = [b' '; 8];
            word[..bytes.len()].copy_from_slice(bytes);
            u64::from_le_bytes(word)
        }
    }
}

const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const ONES: u64 = 0x0101_0101_0101_0101;

/// The high bit of each zero byte of `v`, exactly (no carry crosses bytes, so no false hits).
fn zero_bytes(v: u64) -> u64 {
    !(((v & LOW7) + LOW7) | v | LOW7)
}

/// The high bit of each byte of `x` that is `"`, `\\` or a control character, exactly.
pub(crate) fn special_bytes(x: u64) -> u64 {
    let [quotes, backslashes, controls] = string_bytes_high(x);
    quotes | backslashes | controls
}

/// The high bit of each byte of `x` that is `"`, that is `\\`, and that is a control character.
pub(crate) fn string_bytes_high(x: u64) -> [u64; 3] {
    [
        zero_bytes(x ^ (ONES * u64::from(b'"'))),
        zero_bytes(x ^ (ONES * u64::from(b'\\'))),
        zero_bytes(x & (ONES * 0xe0)),
    ]
}

/// A mask of high bits ([`string_bytes_high`]) as eight bits: bit `i` stands for byte `i`.
pub(crate) fn byte_mask(high: u64) -> u8 {
    // Multiplying gathers the eight high bits into the top byte, in order.
    ((high >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_bytes_follow_odd_backslash_runs() {
        for backslashes in 0..=255u8 {
            for carry_in in [false, true] {
                let (mut want, mut escaping) = (0u8, carry_in);
                for i in 0..8 {
                    if escaping {
                        want |= 1 << i;
                        escaping = false;
                    } else if backslashes & (1 << i) != 0 {
                        escaping = true;
                    }
                }
                let mut carry = carry_in;
                assert_eq!(
                    escaped_bytes(backslashes, &mut carry),
                    want,
                    "{backslashes:#010b} {carry_in}"
                );
                assert_eq!(carry, escaping, "{backslashes:#010b} {carry_in}");
            }
        }
    }

    #[test]
    fn special_bytes_are_found_exactly() {
        assert_eq!(find_special(b"0123456789\"ab"), Some(10));
        assert_eq!(find_special(b"ab\\"), Some(2));
        assert_eq!(find_special(b"0123456789abcdef\x01"), Some(16));
        assert_eq!(find_special("é😀 plain".as_bytes()), None);
        for b in 0..=255u8 {
            let hits = special_bytes(word_at(&[b'a', b, b'"', 0xff, b'\\', 0x1f, b' ', b]));
            let want = (u64::from(is_special(b)) << 15)
                | (1 << 23)
                | (1 << 39)
                | (1 << 47)
                | (u64::from(is_special(b)) << 63);
            assert_eq!(hits, want, "byte {b:#x}");
            let word = [b, b'"', b'\\', 0x1f, 0xff, b'a', b, b'"'];
            let mask = |class: fn(u8) -> bool| {
                (0..8).fold(0u8, |m, i| m | (u8::from(class(word[i])) << i))
            };
            assert_eq!(
                string_bytes_high(word_at(&word)).map(byte_mask),
                [
                    mask(|c| c == b'"'),
                    mask(|c| c == b'\\'),
                    mask(|c| c < 0x20)
                ],
                "byte {b:#x}"
            );
        }
    }
}
