//! The control socket's protocol: one JSON object per line each way (docs/config.md, "Live
//! classes: the control socket"). A request is [`Request`], a reply [`Reply`]; a class is the
//! keys and words of a `[[class]]` table (`"name"`, `"match"`, `"rate": "10mbit"`, ...).

use crate::ops::config::{ClassConfig, Match};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Longest request line in bytes (64 KiB): a class table is a few hundred bytes; a longer line
/// is refused with an error and the connection closed, so a client cannot grow the daemon's
/// buffer without bound.
pub const MAX_REQUEST_LINE: usize = 64 * 1024;

/// The `field` of the line the daemon sends when it closes a connection that was waiting for a
/// request (its read deadline ran out, or a new connection took its place): the request the
/// client sends next was not read, and may be sent again on a new connection.
pub const CONNECTION_FIELD: &str = "connection";

/// A class as the protocol carries it: the keys of one `[[class]]` table.
pub type ClassObject = Map<String, Value>;

/// One request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Request {
    /// Adds a class of the API, last in first-match order.
    Add {
        /// The class (`name` required).
        class: ClassObject,
    },
    /// Changes the given keys of a class of the API (`name` required; a key set to `null` is
    /// removed, taking its default).
    Change {
        /// The class's name and the keys that change.
        class: ClassObject,
    },
    /// Deletes a class of the API.
    Del {
        /// Its name.
        name: String,
    },
    /// Lists every class in force: the file's, then the API's, in first-match order.
    List,
    /// One class.
    Show {
        /// Its name.
        name: String,
    },
}

impl Request {
    /// The request's `op` word.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Add { .. } => "add",
            Request::Change { .. } => "change",
            Request::Del { .. } => "del",
            Request::List => "list",
            Request::Show { .. } => "show",
        }
    }

    /// Parses one request line as the socket read it (without its newline): UTF-8 JSON of the
    /// protocol, else an error saying what is wrong ([`Request::parse`]).
    pub fn parse_bytes(line: &[u8]) -> Result<Request, ReplyError> {
        match std::str::from_utf8(line) {
            Ok(text) => Request::parse(text),
            Err(e) => Err(ReplyError::new(
                "",
                format!(
                    "not a request: a request is UTF-8 JSON, and byte {} is not UTF-8",
                    e.valid_up_to()
                ),
            )),
        }
    }

    /// Parses one request line; the error says what is wrong, naming the field.
    pub fn parse(line: &str) -> Result<Request, ReplyError> {
        serde_json::from_str(line.trim()).map_err(|e| {
            let message = e.to_string();
            let field = if message.contains("`op`") || message.contains("unknown variant") {
                "op"
            } else {
                ""
            };
            ReplyError::new(field, format!("not a request: {message}"))
        })
    }
}

/// Why a request was refused: the field (of the class, or of the request) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyError {
    /// The field (`rate`, `match.dst`, `name`, `op`); empty when the error is about no field.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
    /// What is wrong, and what to do.
    pub message: String,
}

impl ReplyError {
    /// An error about `field`.
    pub fn new(field: &str, message: impl Into<String>) -> ReplyError {
        ReplyError {
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// One reply: `{"ok":true,...}` or `{"ok":false,"error":{...}}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request was carried out.
    pub ok: bool,
    /// Why not, when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ReplyError>,
    /// `add`, `change`, `del`: the class's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `add`, `change`, `del`: microseconds from the request's arrival to the last shaping loop
    /// applying it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_us: Option<u64>,
    /// `add`, `change`, `del`: how many shaping loops applied it (one per silo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loops: Option<usize>,
    /// `show`: the class, with `"source": "file" | "api"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassObject>,
    /// `list`: every class, the same way, in first-match order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<ClassObject>>,
}

impl Reply {
    /// A refusal.
    pub fn refused(error: ReplyError) -> Reply {
        Reply {
            ok: false,
            error: Some(error),
            ..Reply::default()
        }
    }

    /// The reply as one line (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!("{{\"ok\":false,\"error\":{{\"message\":\"encoding the reply: {e}\"}}}}")
        })
    }
}

/// A class of the file as the protocol shows it: its name, match, the policy keys an operator
/// sets most (`rate`, `pacing`, `burst`, `fair`) and its place in the class tree (`parent`,
/// `weight`, `gather`); the file holds the rest.
pub fn file_class_object(class: &ClassConfig) -> ClassObject {
    let mut o = Map::new();
    o.insert("name".into(), Value::from(class.name.clone()));
    let m = match_object(&class.matcher);
    if !m.is_empty() {
        o.insert("match".into(), Value::Object(m));
    }
    let p = &class.policy;
    if let Some(r) = p.rate {
        o.insert("rate".into(), Value::from(r.to_string()));
    }
    if let Some(r) = p.pacing {
        o.insert("pacing".into(), Value::from(r.to_string()));
    }
    if p.is_shaped() {
        o.insert("burst".into(), Value::from(p.burst));
    }
    if p.fair {
        o.insert("fair".into(), Value::from(true));
    }
    let forwarded = class.matcher.from.is_some() || class.matcher.to.is_some();
    if p.pace_sockets != (p.rate.is_some() && !forwarded) {
        o.insert("pace_sockets".into(), Value::from(p.pace_sockets));
    }
    if let Some(parent) = &class.tree.parent {
        o.insert("parent".into(), Value::from(parent.clone()));
        if class.tree.weight != 1 {
            o.insert("weight".into(), Value::from(class.tree.weight));
        }
    }
    if class.tree.gathers_only {
        o.insert("gather".into(), Value::from(true));
    }
    o
}

/// A `match` table in the file's words.
fn match_object(m: &Match) -> ClassObject {
    let mut o = Map::new();
    let ports = |(a, b): (u16, u16)| {
        if a == b {
            Value::from(a)
        } else {
            Value::from(format!("{a}-{b}"))
        }
    };
    if let Some(d) = m.dst {
        o.insert("dst".into(), Value::from(d.to_string()));
    }
    if let Some(s) = m.src {
        o.insert("src".into(), Value::from(s.to_string()));
    }
    if let Some(d) = m.dscp {
        o.insert("dscp".into(), Value::from(d));
    }
    if let Some(p) = m.protocol {
        let word = match p {
            6 => Value::from("tcp"),
            17 => Value::from("udp"),
            1 => Value::from("icmp"),
            58 => Value::from("icmpv6"),
            n => Value::from(n),
        };
        o.insert("protocol".into(), word);
    }
    if let Some(p) = m.dst_port {
        o.insert("dst_port".into(), ports(p));
    }
    if let Some(p) = m.src_port {
        o.insert("src_port".into(), ports(p));
    }
    if let Some(f) = &m.from {
        o.insert("from".into(), Value::from(f.clone()));
    }
    if let Some(t) = &m.to {
        o.insert("to".into(), Value::from(t.clone()));
    }
    if let Some(c) = &m.cgroup {
        o.insert("cgroup".into(), Value::from(c.clone()));
    }
    o
}

/// `base` with `change`'s keys: a key of `change` replaces `base`'s, a `null` removes it.
pub fn merged(base: &ClassObject, change: &ClassObject) -> ClassObject {
    let mut out = base.clone();
    for (k, v) in change {
        if v.is_null() {
            out.remove(k);
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// A class object as a TOML table, for validation (`crate::ops::config::Config::live_class`).
pub fn toml_table(class: &ClassObject) -> Result<toml::Table, ReplyError> {
    match toml::Value::try_from(Value::Object(class.clone())) {
        Ok(toml::Value::Table(t)) => Ok(t),
        Ok(_) => Err(ReplyError::new("class", "not an object")),
        Err(e) => Err(ReplyError::new(
            "class",
            format!("not a [[class]] table: {e} (no null values but in a change)"),
        )),
    }
}

/// `classes` as `[[class]]` tables an operator can append to the configuration file (the key
/// `source` left out): the API's classes are not kept across a restart.
pub fn to_toml(classes: &[ClassObject]) -> Result<String, ReplyError> {
    let tables = classes
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c.remove("source");
            toml_table(&c).map(toml::Value::Table)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut doc = toml::Table::new();
    doc.insert("class".to_owned(), toml::Value::Array(tables));
    toml::to_string(&doc).map_err(|e| ReplyError::new("", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_parse_from_one_line_each() {
        let add = Request::parse(
            r#"{"op":"add","class":{"name":"t1","match":{"dst":"10.0.0.1/32"},"rate":"10mbit"}}"#,
        )
        .unwrap();
        let Request::Add { class } = &add else {
            panic!("{add:?}")
        };
        assert_eq!(class["rate"], json!("10mbit"));
        assert_eq!(add.op(), "add");
        assert_eq!(
            Request::parse(r#"{"op":"del","name":"t1"}"#).unwrap(),
            Request::Del { name: "t1".into() }
        );
        assert_eq!(Request::parse(r#" {"op":"list"} "#).unwrap(), Request::List);
        assert_eq!(
            Request::parse(r#"{"op":"show","name":"x"}"#).unwrap().op(),
            "show"
        );
    }

    #[test]
    fn a_bad_request_is_an_error_naming_what_is_wrong() {
        assert_eq!(Request::parse(r#"{"op":"drop"}"#).unwrap_err().field, "op");
        assert_eq!(Request::parse(r#"{"name":"x"}"#).unwrap_err().field, "op");
        let e = Request::parse(r#"{"op":"del"}"#).unwrap_err();
        assert!(e.message.contains("name"), "{e}");
        let e = Request::parse(r#"{"op":"del","name":"x","extra":1}"#).unwrap_err();
        assert!(e.message.contains("extra"), "{e}");
        assert!(Request::parse("not json").is_err());
    }

    #[test]
    fn a_change_replaces_the_given_keys_and_null_removes_one() {
        let base = json!({"name":"t","rate":"10mbit","pacing":"1mbit"});
        let change = json!({"name":"t","rate":"20mbit","pacing":null});
        let (Value::Object(b), Value::Object(c)) = (base, change) else {
            unreachable!()
        };
        assert_eq!(
            Value::Object(merged(&b, &c)),
            json!({"name":"t","rate":"20mbit"})
        );
    }

    #[test]
    fn replies_round_trip_and_omit_what_they_do_not_carry() {
        let r = Reply::refused(ReplyError::new("rate", "\"fast\" is not a rate"));
        let line = r.to_line();
        assert_eq!(
            line,
            r#"{"ok":false,"error":{"field":"rate","message":"\"fast\" is not a rate"}}"#
        );
        let back: Reply = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
        let ok = Reply {
            ok: true,
            name: Some("t".into()),
            applied_us: Some(40),
            loops: Some(1),
            ..Reply::default()
        };
        assert_eq!(
            ok.to_line(),
            r#"{"ok":true,"name":"t","applied_us":40,"loops":1}"#
        );
    }

    #[test]
    fn a_class_object_becomes_a_table_the_configuration_validates() {
        let config = crate::ops::config::Config::from_toml_str(
            "[interfaces]\ninside = \"a\"\noutside = \"b\"\n",
            "t.toml",
        )
        .unwrap();
        let Value::Object(o) =
            json!({"name":"t","match":{"dst":"10.0.0.1/32","protocol":"udp"},"rate":"10mbit"})
        else {
            unreachable!()
        };
        let class = config.live_class(&toml_table(&o).unwrap()).unwrap();
        assert_eq!(class.policy.rate, Some(metronome_core::Rate::mbps(10)));
        let shown = file_class_object(&class);
        assert_eq!(shown["match"]["protocol"], json!("udp"));
        assert_eq!(shown["rate"], json!("10mbit"));
        // As [[class]] tables, it is a class of the file again.
        let text = format!(
            "[interfaces]\ninside = \"a\"\noutside = \"b\"\n{}",
            to_toml(std::slice::from_ref(&o)).unwrap()
        );
        let file = crate::ops::config::Config::from_toml_str(&text, "t.toml").unwrap();
        assert_eq!(file.classes[0].matcher, class.matcher);
        // Errors name the class's field.
        let bad = |v: Value| {
            let Value::Object(o) = v else { unreachable!() };
            config.live_class(&toml_table(&o).unwrap()).unwrap_err()
        };
        assert_eq!(bad(json!({"name":"t","rate":"fast"})).field, "rate");
        assert_eq!(
            bad(json!({"name":"t","match":{"dst":"10.0.0.1/8"}})).field,
            "match.dst"
        );
        assert_eq!(bad(json!({"name":"t","speed":"1mbit"})).field, "speed");
        // A table without a name: about the whole class.
        assert_eq!(bad(json!({"rate":"1mbit"})).field, "class");
    }
}
