//! `metronome compare schema MODE`: the JSON schema of what `metronome compare MODE --json`
//! prints, generated from the document's types (`schemars`), so that no page lists the fields
//! by hand.

use crate::compare_attach::AttachDocument;
use crate::compare_churn::ChurnDocument;
use crate::compare_classes::{ClassesDocument, PacketRateDocument};
use crate::compare_cluster::ClusterDocument;
use crate::compare_cmd::Document;
use crate::compare_cni::CniDocument;
use crate::compare_hierarchy::HierarchyDocument;
use metronome_testbed::compare::link_sharing::LinkRow;
use metronome_testbed::compare::Row;

/// A mode whose `--json` document has a schema.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaOf {
    /// The kernel grid and the ceiling (`compare --json`, `compare ceiling --json`).
    Kernel,
    /// `compare link-sharing --json`.
    LinkSharing,
    /// `compare attach --json`.
    Attach,
    /// `compare cni --json`.
    Cni,
    /// `compare classes --json`.
    Classes,
    /// `compare packet-rate --json`.
    PacketRate,
    /// `compare churn --json`.
    Churn,
    /// `compare cluster --json`.
    Cluster,
    /// `compare hierarchy --json`.
    Hierarchy,
}

/// The schema of `mode`'s `--json` document, as pretty JSON.
pub fn schema(mode: SchemaOf) -> serde_json::Result<String> {
    let schema = match mode {
        SchemaOf::Kernel => schemars::schema_for!(Document<Row>),
        SchemaOf::LinkSharing => schemars::schema_for!(Document<LinkRow>),
        SchemaOf::Attach => schemars::schema_for!(AttachDocument),
        SchemaOf::Cni => schemars::schema_for!(CniDocument),
        SchemaOf::Classes => schemars::schema_for!(ClassesDocument),
        SchemaOf::PacketRate => schemars::schema_for!(PacketRateDocument),
        SchemaOf::Churn => schemars::schema_for!(ChurnDocument),
        SchemaOf::Cluster => schemars::schema_for!(ClusterDocument),
        SchemaOf::Hierarchy => schemars::schema_for!(HierarchyDocument),
    };
    serde_json::to_string_pretty(&schema)
}

/// The top-level fields `mode`'s schema names (for the tests of each document).
#[cfg(test)]
pub fn fields(mode: SchemaOf) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(&schema(mode).unwrap()).unwrap();
    let mut keys: Vec<String> = v["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    keys.sort_unstable();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn every_mode_has_a_schema_of_an_object() {
        for &mode in SchemaOf::value_variants() {
            let v: serde_json::Value = serde_json::from_str(&schema(mode).unwrap()).unwrap();
            assert_eq!(v["type"], "object", "{mode:?}");
            assert!(!fields(mode).is_empty(), "{mode:?}");
        }
        assert!(fields(SchemaOf::Kernel).contains(&"rows".to_owned()));
    }

    /// Whether `all` holds every field of `some`, with the same value (recursively).
    fn holds(all: &serde_json::Value, some: &serde_json::Value) -> bool {
        use serde_json::Value;
        match (all, some) {
            (Value::Object(a), Value::Object(b)) => {
                b.iter().all(|(k, v)| a.get(k).is_some_and(|x| holds(x, v)))
            }
            (Value::Array(a), Value::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| holds(x, y))
            }
            (a, b) => a == b,
        }
    }

    /// How many of the committed results named `prefix...json` (under `docs/results`) read as
    /// `T`; each of them must come back field for field (runs older than the document's
    /// present shape do not read and are skipped; the callers ask for one at least).
    fn read_back<T: serde::de::DeserializeOwned + serde::Serialize>(prefix: &str) -> usize {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/results/");
        let (dir, start) = prefix.rsplit_once('/').unwrap_or(("", prefix));
        let mut read = 0;
        for entry in std::fs::read_dir(format!("{root}{dir}")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !(name.starts_with(start) && name.ends_with(".json")) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let whole: serde_json::Value = serde_json::from_str(&text).unwrap();
            // A file holds one document, or several runs merged by key.
            let docs: Vec<&serde_json::Value> = match whole.as_object() {
                Some(runs) if serde_json::from_value::<T>(whole.clone()).is_err() => {
                    runs.values().collect()
                }
                _ => vec![&whole],
            };
            for before in docs {
                let Ok(doc) = serde_json::from_value::<T>(before.clone()) else {
                    continue;
                };
                let after = serde_json::to_value(&doc).unwrap();
                assert!(holds(&after, before), "{name}: {after}");
                read += 1;
            }
        }
        read
    }

    #[test]
    fn the_committed_results_read_back_as_their_documents() {
        assert!(read_back::<Document<LinkRow>>("compare-link-sharing") > 0);
        assert!(read_back::<Document<Row>>("compare-") > 1);
        assert!(read_back::<AttachDocument>("attach/compare-attach") > 0);
        assert!(read_back::<CniDocument>("cni/compare-cni") > 0);
        assert!(read_back::<ClassesDocument>("classes/classes-") > 0);
        assert!(read_back::<PacketRateDocument>("classes/pps-") > 0);
        assert!(read_back::<ChurnDocument>("classes/churn-") > 0);
        assert!(read_back::<ClusterDocument>("cluster/") > 0);
        assert!(read_back::<HierarchyDocument>("hierarchy/") > 1);
    }
}
