//! LEB128 varints and zigzag integers, the field encoding of record
//! bodies.

/// Appends `v` as an LEB128 varint.
#[inline]
pub fn put_u(out: &mut Vec<u8>, mut v: u64) {
    // One and two bytes, the common lengths (a call's time delta, a
    // function's number), written at once rather than byte by byte.
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    if v < 0x4000 {
        out.extend_from_slice(&[(v as u8) | 0x80, (v >> 7) as u8]);
        return;
    }
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends `v` zigzag-encoded.
#[inline]
pub fn put_s(out: &mut Vec<u8>, v: i64) {
    put_u(out, ((v << 1) ^ (v >> 63)).cast_unsigned());
}

/// Appends a length and the bytes.
#[inline]
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Why a field could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldError {
    /// The body ends inside the field.
    Truncated,
    /// A varint longer than 10 bytes or beyond 64 bits.
    Overlong,
}

/// Reads fields from a body.
#[derive(Clone, Copy, Debug)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    #[must_use]
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Bytes read so far.
    #[must_use]
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Whether every byte was read.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    /// A varint.
    #[inline]
    pub fn u(&mut self) -> Result<u64, FieldError> {
        // Most fields (ids, deltas, counts) fit in one byte: no loop.
        if let Some(&b) = self.bytes.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        let mut v = 0u64;
        for i in 0..10 {
            let b = *self.bytes.get(self.pos).ok_or(FieldError::Truncated)?;
            self.pos += 1;
            let bits = u64::from(b & 0x7f);
            if i == 9 && bits > 1 {
                return Err(FieldError::Overlong);
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(FieldError::Overlong)
    }

    /// A zigzag varint.
    #[inline]
    pub fn s(&mut self) -> Result<i64, FieldError> {
        let u = self.u()?;
        Ok((u >> 1).cast_signed() ^ -((u & 1).cast_signed()))
    }

    /// A length and that many bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], FieldError> {
        let n = usize::try_from(self.u()?).map_err(|_| FieldError::Truncated)?;
        let end = self.pos.checked_add(n).ok_or(FieldError::Truncated)?;
        let out = self.bytes.get(self.pos..end).ok_or(FieldError::Truncated)?;
        self.pos = end;
        Ok(out)
    }

    /// The rest of the body.
    #[must_use]
    pub fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_encodings() {
        let mut out = Vec::new();
        put_u(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        out.clear();
        put_s(&mut out, -1);
        assert_eq!(out, [0x01]);
        out.clear();
        put_u(&mut out, u64::MAX);
        assert_eq!(out.len(), 10);
        assert_eq!(Cursor::new(&out).u(), Ok(u64::MAX));
        // 2^64 does not fit.
        let mut bad = out.clone();
        bad[9] = 0x02;
        assert_eq!(Cursor::new(&bad).u(), Err(FieldError::Overlong));
        assert_eq!(Cursor::new(&[0x80]).u(), Err(FieldError::Truncated));
    }

    proptest::proptest! {
        #[test]
        fn round_trip(u in proptest::num::u64::ANY, s in proptest::num::i64::ANY) {
            let mut out = Vec::new();
            put_u(&mut out, u);
            put_s(&mut out, s);
            let mut c = Cursor::new(&out);
            proptest::prop_assert_eq!(c.u(), Ok(u));
            proptest::prop_assert_eq!(c.s(), Ok(s));
            proptest::prop_assert!(c.is_empty());
        }
    }
}
