//! A subset of HBase's filter language (`TScan.filterString`, `ParseFilter`).
//!
//! Supported: `PrefixFilter`, `SingleColumnValueFilter` (comparators
//! `binary:`, `binaryprefix:`, `substring:`), `KeyOnlyFilter`,
//! `FirstKeyOnlyFilter`, `ColumnPrefixFilter`, combined with `AND`, and `OR`
//! between row filters. Anything else is refused with an `IOError` rather than
//! silently ignored, so a test never passes on a filter the emulator skipped.

use std::borrow::Cow;
use std::cmp::Ordering;

use crate::error::{HError, HResult};
use crate::table::Cell;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CompareOp {
    Less,
    LessOrEqual,
    Equal,
    NotEqual,
    GreaterOrEqual,
    Greater,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Comparator {
    Binary(Vec<u8>),
    BinaryPrefix(Vec<u8>),
    /// Case-insensitive, stored lower-cased (HBase `SubstringComparator`).
    Substring(Vec<u8>),
}

impl Comparator {
    fn parse(spec: &[u8]) -> HResult<Self> {
        let colon = spec.iter().position(|&b| b == b':');
        let (kind, value) = match colon {
            Some(i) => (&spec[..i], spec[i + 1..].to_vec()),
            None => return Err(syntax("comparator must be type:value")),
        };
        match kind.to_ascii_lowercase().as_slice() {
            b"binary" => Ok(Self::Binary(value)),
            b"binaryprefix" => Ok(Self::BinaryPrefix(value)),
            b"substring" => Ok(Self::Substring(value.to_ascii_lowercase())),
            other => Err(unsupported(&String::from_utf8_lossy(other))),
        }
    }

    /// `comparator.compareTo(cellValue)`: operand against cell, as in Java.
    fn compare(&self, cell: &[u8]) -> Ordering {
        match self {
            Self::Binary(v) => v.as_slice().cmp(cell),
            Self::BinaryPrefix(v) => v.as_slice().cmp(&cell[..cell.len().min(v.len())]),
            Self::Substring(v) => {
                let hay = cell.to_ascii_lowercase();
                let found = v.is_empty() || hay.windows(v.len()).any(|w| w == v.as_slice());
                if found { Ordering::Equal } else { Ordering::Greater }
            }
        }
    }
}

impl CompareOp {
    /// `CompareFilter.compare` says when to filter *out*; this is its negation.
    fn keeps(self, operand_vs_cell: Ordering) -> bool {
        use Ordering::*;
        match self {
            Self::Less => operand_vs_cell == Greater,
            Self::LessOrEqual => operand_vs_cell != Less,
            Self::Equal => operand_vs_cell == Equal,
            Self::NotEqual => operand_vs_cell != Equal,
            Self::GreaterOrEqual => operand_vs_cell != Greater,
            Self::Greater => operand_vs_cell == Less,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColumnValueFilter {
    pub family: Vec<u8>,
    pub qualifier: Vec<u8>,
    op: CompareOp,
    comparator: Comparator,
    filter_if_missing: bool,
    latest_version_only: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Filter {
    Prefix(Vec<u8>),
    ColumnValue(ColumnValueFilter),
    KeyOnly { length_as_value: bool },
    FirstKeyOnly,
    ColumnPrefix(Vec<u8>),
    And(Vec<Filter>),
    Or(Vec<Filter>),
}

/// Gives a row filter the visible versions (newest first) of one column, or
/// nothing when the scan does not read that column.
pub(crate) type ColumnLookup<'a> = dyn Fn(&[u8], &[u8]) -> Vec<Vec<u8>> + 'a;

impl Filter {
    pub fn parse(text: &[u8]) -> HResult<Filter> {
        let tokens = tokenize(text)?;
        let mut parser = Parser { tokens, pos: 0 };
        let filter = parser.or_expr()?;
        if parser.pos != parser.tokens.len() {
            return Err(syntax("unexpected text after the filter"));
        }
        Ok(filter)
    }

    /// Row-level filters (prefix, column value); cell filters always pass.
    pub fn row_passes(&self, row: &[u8], lookup: &ColumnLookup<'_>) -> bool {
        match self {
            Filter::Prefix(p) => row.starts_with(p),
            Filter::ColumnValue(f) => {
                let values = lookup(&f.family, &f.qualifier);
                let matches = |v: &Vec<u8>| f.op.keeps(f.comparator.compare(v));
                match values.first() {
                    None => !f.filter_if_missing,
                    Some(newest) if f.latest_version_only => matches(newest),
                    Some(_) => values.iter().any(matches),
                }
            }
            Filter::KeyOnly { .. } | Filter::FirstKeyOnly | Filter::ColumnPrefix(_) => true,
            Filter::And(all) => all.iter().all(|f| f.row_passes(row, lookup)),
            Filter::Or(any) => any.iter().any(|f| f.row_passes(row, lookup)),
        }
    }

    /// Applies cell-level filters to a row's cells.
    pub fn apply_cells<'a>(&self, cells: Vec<Cell<'a>>) -> Vec<Cell<'a>> {
        match self {
            Filter::KeyOnly { length_as_value } => cells
                .into_iter()
                .map(|mut c| {
                    c.value = if *length_as_value {
                        let len = u32::try_from(c.value.len()).unwrap_or(u32::MAX);
                        Cow::Owned(len.to_be_bytes().to_vec())
                    } else {
                        Cow::Borrowed(&[])
                    };
                    c
                })
                .collect(),
            Filter::FirstKeyOnly => cells.into_iter().take(1).collect(),
            Filter::ColumnPrefix(p) => cells.into_iter().filter(|c| c.qualifier.starts_with(p)).collect(),
            Filter::And(all) => all.iter().fold(cells, |cells, f| f.apply_cells(cells)),
            Filter::Prefix(_) | Filter::ColumnValue(_) | Filter::Or(_) => cells,
        }
    }

    /// True once no later row can pass, so the scan can end (what HBase's
    /// `PrefixFilter.filterAllRemaining` does).
    pub fn exhausted(&self, row: &[u8], reversed: bool) -> bool {
        match self {
            Filter::Prefix(p) => {
                let past = if reversed {
                    row < p.as_slice()
                } else {
                    row > p.as_slice()
                };
                past && !row.starts_with(p)
            }
            Filter::And(all) => all.iter().any(|f| f.exhausted(row, reversed)),
            Filter::Or(any) => any.iter().all(|f| f.exhausted(row, reversed)),
            _ => false,
        }
    }

    fn is_row_filter(&self) -> bool {
        match self {
            Filter::Prefix(_) | Filter::ColumnValue(_) => true,
            Filter::And(fs) | Filter::Or(fs) => fs.iter().all(Filter::is_row_filter),
            _ => false,
        }
    }
}

fn syntax(why: &str) -> HError {
    HError::io(format!(
        "java.lang.IllegalArgumentException: Incorrect filter string: {why}"
    ))
}

fn unsupported(what: &str) -> HError {
    HError::io(format!(
        "hbase-emulator does not support {what} in filter strings (supported: PrefixFilter, \
         SingleColumnValueFilter, KeyOnlyFilter, FirstKeyOnlyFilter, ColumnPrefixFilter, AND, \
         OR of row filters)"
    ))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Open,
    Close,
    Comma,
    Quoted(Vec<u8>),
    Op(CompareOp),
    Word(String),
}

fn tokenize(text: &[u8]) -> HResult<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        let two = text.get(i..i + 2).unwrap_or_default();
        let (token, len) = match b {
            b' ' | b'\t' | b'\r' | b'\n' => {
                i += 1;
                continue;
            }
            b'(' => (Token::Open, 1),
            b')' => (Token::Close, 1),
            b',' => (Token::Comma, 1),
            b'\'' => {
                let (value, len) = quoted(&text[i..])?;
                (Token::Quoted(value), len)
            }
            _ if two == b"<=" => (Token::Op(CompareOp::LessOrEqual), 2),
            _ if two == b">=" => (Token::Op(CompareOp::GreaterOrEqual), 2),
            _ if two == b"!=" => (Token::Op(CompareOp::NotEqual), 2),
            b'<' => (Token::Op(CompareOp::Less), 1),
            b'>' => (Token::Op(CompareOp::Greater), 1),
            b'=' => (Token::Op(CompareOp::Equal), 1),
            _ if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' => {
                let len = text[i..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_' || **c == b'-')
                    .count();
                let word = String::from_utf8_lossy(&text[i..i + len]).into_owned();
                (Token::Word(word), len)
            }
            _ => return Err(syntax(&format!("unexpected character at {i}"))),
        };
        tokens.push(token);
        i += len;
    }
    Ok(tokens)
}

/// Reads `'...'` where `''` stands for one quote; returns value and length.
fn quoted(text: &[u8]) -> HResult<(Vec<u8>, usize)> {
    let mut value = Vec::new();
    let mut i = 1;
    while i < text.len() {
        if text[i] == b'\'' {
            if text.get(i + 1) == Some(&b'\'') {
                value.push(b'\'');
                i += 2;
                continue;
            }
            return Ok((value, i + 1));
        }
        value.push(text[i]);
        i += 1;
    }
    Err(syntax("unterminated quoted string"))
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek_word(&self, word: &str) -> bool {
        matches!(self.tokens.get(self.pos), Some(Token::Word(w)) if w.eq_ignore_ascii_case(word))
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        token
    }

    fn expect(&mut self, want: Token) -> HResult<()> {
        match self.next() {
            Some(t) if t == want => Ok(()),
            _ => Err(syntax(&format!("expected {want:?}"))),
        }
    }

    /// AND binds tighter than OR, as in HBase's `ParseFilter`.
    fn or_expr(&mut self) -> HResult<Filter> {
        let mut parts = vec![self.and_expr()?];
        while self.peek_word("OR") {
            self.pos += 1;
            parts.push(self.and_expr()?);
        }
        if parts.len() == 1 {
            return Ok(parts.remove(0));
        }
        if !parts.iter().all(Filter::is_row_filter) {
            return Err(unsupported("OR over cell filters"));
        }
        Ok(Filter::Or(parts))
    }

    fn and_expr(&mut self) -> HResult<Filter> {
        let mut parts = vec![self.unary()?];
        while self.peek_word("AND") {
            self.pos += 1;
            parts.push(self.unary()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Filter::And(parts)
        })
    }

    fn unary(&mut self) -> HResult<Filter> {
        match self.next() {
            Some(Token::Open) => {
                let inner = self.or_expr()?;
                self.expect(Token::Close)?;
                Ok(inner)
            }
            Some(Token::Word(w)) if w.eq_ignore_ascii_case("SKIP") || w.eq_ignore_ascii_case("WHILE") => {
                Err(unsupported(&w))
            }
            Some(Token::Word(name)) => {
                let args = self.arguments()?;
                build(&name, args)
            }
            _ => Err(syntax("expected a filter")),
        }
    }

    fn arguments(&mut self) -> HResult<Vec<Token>> {
        self.expect(Token::Open)?;
        let mut args = Vec::new();
        if self.tokens.get(self.pos) == Some(&Token::Close) {
            self.pos += 1;
            return Ok(args);
        }
        loop {
            match self.next() {
                Some(t @ (Token::Quoted(_) | Token::Op(_) | Token::Word(_))) => args.push(t),
                _ => return Err(syntax("expected a filter argument")),
            }
            match self.next() {
                Some(Token::Comma) => continue,
                Some(Token::Close) => return Ok(args),
                _ => return Err(syntax("expected , or )")),
            }
        }
    }
}

fn build(name: &str, args: Vec<Token>) -> HResult<Filter> {
    let wrong = || syntax(&format!("wrong arguments for {name}"));
    let bytes = |t: &Token| match t {
        Token::Quoted(v) => Ok(v.clone()),
        _ => Err(wrong()),
    };
    let boolean = |t: &Token| match t {
        Token::Word(w) if w.eq_ignore_ascii_case("true") => Ok(true),
        Token::Word(w) if w.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err(wrong()),
    };
    match (name, args.as_slice()) {
        ("PrefixFilter", [p]) => Ok(Filter::Prefix(bytes(p)?)),
        ("ColumnPrefixFilter", [p]) => Ok(Filter::ColumnPrefix(bytes(p)?)),
        ("FirstKeyOnlyFilter", []) => Ok(Filter::FirstKeyOnly),
        ("KeyOnlyFilter", []) => Ok(Filter::KeyOnly { length_as_value: false }),
        ("KeyOnlyFilter", [b]) => Ok(Filter::KeyOnly {
            length_as_value: boolean(b)?,
        }),
        ("SingleColumnValueFilter", [f, q, Token::Op(op), c, rest @ ..]) => {
            let (filter_if_missing, latest_version_only) = match rest {
                [] => (false, true),
                [m, l] => (boolean(m)?, boolean(l)?),
                _ => return Err(wrong()),
            };
            Ok(Filter::ColumnValue(ColumnValueFilter {
                family: bytes(f)?,
                qualifier: bytes(q)?,
                op: *op,
                comparator: Comparator::parse(&bytes(c)?)?,
                filter_if_missing,
                latest_version_only,
            }))
        }
        (
            "PrefixFilter" | "ColumnPrefixFilter" | "FirstKeyOnlyFilter" | "KeyOnlyFilter" | "SingleColumnValueFilter",
            _,
        ) => Err(wrong()),
        _ => Err(unsupported(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup_with(value: Option<&'static [u8]>) -> impl Fn(&[u8], &[u8]) -> Vec<Vec<u8>> {
        move |_: &[u8], _: &[u8]| value.map(|v| vec![v.to_vec()]).unwrap_or_default()
    }

    #[test]
    fn parses_prefix_and_column_value() {
        let f = Filter::parse(b"PrefixFilter('it''s')").unwrap();
        assert_eq!(f, Filter::Prefix(b"it's".to_vec()));
        let f = Filter::parse(b"SingleColumnValueFilter('C','a',=,'binary:x',true,true)").unwrap();
        assert!(f.row_passes(b"r", &lookup_with(Some(b"x"))));
        assert!(!f.row_passes(b"r", &lookup_with(Some(b"y"))));
        assert!(!f.row_passes(b"r", &lookup_with(None)));
        let lenient = Filter::parse(b"SingleColumnValueFilter('C','a',=,'binary:x')").unwrap();
        assert!(lenient.row_passes(b"r", &lookup_with(None)));
    }

    #[test]
    fn comparison_direction_is_cell_op_operand() {
        let f = Filter::parse(b"SingleColumnValueFilter('C','a',<,'binary:m',true,true)").unwrap();
        assert!(f.row_passes(b"r", &lookup_with(Some(b"a"))));
        assert!(!f.row_passes(b"r", &lookup_with(Some(b"z"))));
    }

    #[test]
    fn combinations_and_rejections() {
        let f = Filter::parse(b"PrefixFilter('a') AND KeyOnlyFilter() OR PrefixFilter('b')");
        assert!(matches!(f, Err(HError::Io { .. })));
        let f = Filter::parse(b"(PrefixFilter('a') OR PrefixFilter('b')) AND KeyOnlyFilter()");
        assert!(f.is_ok());
        assert!(Filter::parse(b"RowFilter(=,'binary:a')").is_err());
        assert!(Filter::parse(b"PrefixFilter('a'").is_err());
        assert!(Filter::parse(b"SKIP PrefixFilter('a')").is_err());
    }

    #[test]
    fn prefix_exhaustion() {
        let f = Filter::Prefix(b"b".to_vec());
        assert!(!f.exhausted(b"a", false));
        assert!(!f.exhausted(b"bz", false));
        assert!(f.exhausted(b"c", false));
        assert!(f.exhausted(b"a", true));
    }
}
