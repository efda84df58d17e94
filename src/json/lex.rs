//! PURE: the tokenizer under the review parser and the canonical writer: whitespace, strings,
//! numbers and the walk over an object's or array's elements, each checked as `serde_json`
//! checks it. It builds nothing and knows neither Kubernetes nor RFC 8785; it only records, for
//! the canonical judge, whether it skipped whitespace and how much work strings' escapes need.

use std::borrow::Cow;

use serde_json::Number;

use super::{byte_mask, string_bytes_high, word_at};

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
}
