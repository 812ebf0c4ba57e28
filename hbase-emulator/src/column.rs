//! Column names on the wire (`family:qualifier`) and column selections.

use std::collections::{BTreeMap, BTreeSet};

/// A parsed column name, split at the first `:` like HBase's
/// `CellUtil.parseColumn`: `fam` names a whole family, `fam:` names the column
/// with an empty qualifier, `fam:q` names one column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ColumnName {
    Family(Vec<u8>),
    Column(Vec<u8>, Vec<u8>),
}

impl ColumnName {
    pub fn parse(raw: &[u8]) -> Self {
        match raw.iter().position(|&b| b == b':') {
            None => ColumnName::Family(raw.to_vec()),
            Some(i) => ColumnName::Column(raw[..i].to_vec(), raw[i + 1..].to_vec()),
        }
    }

    pub fn family(&self) -> &[u8] {
        match self {
            ColumnName::Family(f) | ColumnName::Column(f, _) => f,
        }
    }
}

/// `family:qualifier`, the key of `TRowResult.columns` (HBase `makeColumn`).
pub(crate) fn make_column(family: &[u8], qualifier: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(family.len() + 1 + qualifier.len());
    out.extend_from_slice(family);
    out.push(b':');
    out.extend_from_slice(qualifier);
    out
}

/// Which columns a Get or Scan reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Selection {
    /// No columns named: every family of the table.
    #[default]
    All,
    /// family -> `None` (whole family) or the qualifiers asked for.
    Families(BTreeMap<Vec<u8>, Option<BTreeSet<Vec<u8>>>>),
}

impl Selection {
    /// Builds the selection the Java handler builds by calling `addFamily` /
    /// `addColumn` in request order. That keeps HBase's quirk: `addColumn`
    /// after `addFamily` for the same family narrows it to that one column,
    /// while `addFamily` after `addColumn` widens it to the whole family.
    pub fn from_columns<'a>(columns: impl IntoIterator<Item = &'a Vec<u8>>) -> Self {
        let mut map: BTreeMap<Vec<u8>, Option<BTreeSet<Vec<u8>>>> = BTreeMap::new();
        for raw in columns {
            match ColumnName::parse(raw) {
                ColumnName::Family(f) => {
                    map.insert(f, None);
                }
                ColumnName::Column(f, q) => match map.get_mut(&f) {
                    Some(Some(set)) => {
                        set.insert(q);
                    }
                    _ => {
                        map.insert(f, Some(BTreeSet::from([q])));
                    }
                },
            }
        }
        if map.is_empty() {
            Selection::All
        } else {
            Selection::Families(map)
        }
    }

    pub fn single(column: &ColumnName) -> Self {
        let set = match column {
            ColumnName::Family(_) => None,
            ColumnName::Column(_, q) => Some(BTreeSet::from([q.clone()])),
        };
        Selection::Families(BTreeMap::from([(column.family().to_vec(), set)]))
    }

    /// Families named explicitly (empty for `All`).
    pub fn families(&self) -> impl Iterator<Item = &[u8]> {
        let named = match self {
            Selection::All => None,
            Selection::Families(map) => Some(map.keys().map(Vec::as_slice)),
        };
        named.into_iter().flatten()
    }

    pub fn includes(&self, family: &[u8], qualifier: &[u8]) -> bool {
        match self {
            Selection::All => true,
            Selection::Families(map) => match map.get(family) {
                None => false,
                Some(None) => true,
                Some(Some(set)) => set.contains(qualifier),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_hbase() {
        assert_eq!(ColumnName::parse(b"cf"), ColumnName::Family(b"cf".to_vec()));
        assert_eq!(ColumnName::parse(b"cf:"), ColumnName::Column(b"cf".to_vec(), vec![]));
        assert_eq!(
            ColumnName::parse(b"cf:a:b"),
            ColumnName::Column(b"cf".to_vec(), b"a:b".to_vec())
        );
    }

    #[test]
    fn add_column_after_add_family_narrows() {
        let sel = Selection::from_columns(&[b"cf".to_vec(), b"cf:a".to_vec()]);
        assert!(sel.includes(b"cf", b"a"));
        assert!(!sel.includes(b"cf", b"b"));
        let sel = Selection::from_columns(&[b"cf:a".to_vec(), b"cf".to_vec()]);
        assert!(sel.includes(b"cf", b"b"));
        assert_eq!(Selection::from_columns(&[]), Selection::All);
    }
}
