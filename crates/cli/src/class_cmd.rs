//! `metronome class add|change|del|list|show`: a running daemon's classes through its control
//! socket (`metronome_daemon::ops::control`, docs/config.md "Live classes: the control
//! socket").
//!
//! The socket is `--socket PATH`, else the `[daemon] control` of `--config FILE`, else
//! `/run/metronome/control.sock`. Output is tc-like (`class NAME ...` lines); `--json` prints
//! the daemon's objects, `list --toml` the API's classes as `[[class]]` tables.
//!
//! Exit status: 0 on success; 2 when the daemon refuses the request (the message names the
//! field: `rate: "fast" is not a rate ...`) or the arguments are wrong; 1 when no daemon
//! answers on the socket (not running, or another `[daemon] control`).

use clap::{Args, Subcommand};
use metronome_daemon::ops::config::{Config, DEFAULT_CONTROL};
use metronome_daemon::ops::control::{protocol, ClassObject, Client, Reply, Request};
use serde_json::Value;
use std::path::PathBuf;

/// Options of `metronome class`.
#[derive(Args, Debug)]
pub struct ClassArgs {
    /// The daemon's control socket (default: `--config`'s `[daemon] control`, else
    /// /run/metronome/control.sock).
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// The daemon's configuration, whose `[daemon] control` names the socket.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    op: ClassOp,
}

#[derive(Subcommand, Debug)]
enum ClassOp {
    /// Add a class, last in first-match order (after the file's classes).
    Add(ClassFields),
    /// Change the given fields of a class added with `class add`.
    Change(ClassFields),
    /// Delete a class added with `class add`; its queued packets leave at its rate first.
    Del {
        /// The class's name.
        name: String,
    },
    /// List the classes in force: the file's, then the API's, in first-match order.
    List {
        /// Print the daemon's objects as JSON.
        #[arg(long, conflicts_with = "toml")]
        json: bool,
        /// Print the API's classes as [[class]] tables to append to the file.
        #[arg(long)]
        toml: bool,
    },
    /// Show one class.
    Show {
        /// The class's name.
        name: String,
        /// Print the daemon's object as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The fields of `add` and `change`, in the words of a `[[class]]` table (docs/config.md).
#[derive(Args, Debug)]
struct ClassFields {
    /// The class's name.
    name: String,
    /// A match field, `KEY=VALUE` (`dst=10.0.0.0/24`, `protocol=tcp`, `dst_port=5201-5216`,
    /// `dscp=46`, `src`, `src_port`; in attach mode `from`, `to`, `cgroup`); repeat for several.
    /// With `change`, the whole match.
    #[arg(long = "match", value_name = "KEY=VALUE")]
    matches: Vec<String>,
    /// Aggregate rate (`10mbit`).
    #[arg(long, value_name = "RATE")]
    rate: Option<String>,
    /// Per-flow pacing rate (`1mbit`).
    #[arg(long, value_name = "RATE")]
    pacing: Option<String>,
    /// Burst (`15k`, bytes).
    #[arg(long, value_name = "SIZE")]
    burst: Option<String>,
    /// Fair queueing among the class's flows.
    #[arg(long)]
    fair: bool,
    /// The class's parent in the class tree: its packets are charged to it too, and its rate
    /// is shared among its children.
    #[arg(long, value_name = "NAME")]
    parent: Option<String>,
    /// The class's weight among its siblings (1 to 10000; with `--parent`).
    #[arg(long, value_name = "N")]
    weight: Option<u32>,
    /// The class takes no packet of its own, only gathers its children's (give no `--match`).
    #[arg(long)]
    gather: bool,
    /// `change` only: a field to remove (it takes its default), e.g. `--unset pacing`.
    #[arg(long, value_name = "KEY")]
    unset: Vec<String>,
}

impl ClassFields {
    /// The class object of the protocol.
    fn object(&self) -> Result<ClassObject, String> {
        let mut o = ClassObject::new();
        o.insert("name".into(), Value::from(self.name.clone()));
        if !self.matches.is_empty() {
            let mut m = ClassObject::new();
            for kv in &self.matches {
                let Some((k, v)) = kv.split_once('=') else {
                    return Err(format!("--match {kv:?}: KEY=VALUE expected"));
                };
                m.insert(k.trim().to_owned(), match_value(k.trim(), v.trim()));
            }
            o.insert("match".into(), Value::Object(m));
        }
        for (key, value) in [
            ("rate", &self.rate),
            ("pacing", &self.pacing),
            ("burst", &self.burst),
        ] {
            if let Some(v) = value {
                o.insert(key.into(), Value::from(v.clone()));
            }
        }
        if self.fair {
            o.insert("fair".into(), Value::from(true));
        }
        if let Some(p) = &self.parent {
            o.insert("parent".into(), Value::from(p.clone()));
        }
        if let Some(w) = self.weight {
            o.insert("weight".into(), Value::from(w));
        }
        if self.gather {
            o.insert("gather".into(), Value::from(true));
        }
        for key in &self.unset {
            o.insert(key.clone(), Value::Null);
        }
        Ok(o)
    }
}

/// A match value as the file writes it: a number where the file takes one (`dscp`, a single
/// port, a protocol number), else the text.
fn match_value(key: &str, value: &str) -> Value {
    let numeric = matches!(key, "dscp" | "dst_port" | "src_port" | "protocol");
    match value.parse::<u64>() {
        Ok(n) if numeric => Value::from(n),
        _ => Value::from(value),
    }
}

/// Runs the request and prints the reply; exits 2 on a refusal, 1 when no daemon answers.
pub fn run(args: ClassArgs) -> anyhow::Result<()> {
    let word = match &args.op {
        ClassOp::Add(_) => "add",
        ClassOp::Change(_) => "change",
        ClassOp::Del { .. } => "del",
        ClassOp::List { .. } => "list",
        ClassOp::Show { .. } => "show",
    };
    let fail = |status: i32, message: String| -> ! {
        eprintln!("metronome class {word}: {message}");
        std::process::exit(status);
    };
    // The arguments first: a wrong one is the user's to fix whether a daemon runs or not.
    let request = match &args.op {
        ClassOp::Add(f) => f.object().map(|class| Request::Add { class }),
        ClassOp::Change(f) => f.object().map(|class| Request::Change { class }),
        ClassOp::Del { name } => Ok(Request::Del { name: name.clone() }),
        ClassOp::List { .. } => Ok(Request::List),
        ClassOp::Show { name, .. } => Ok(Request::Show { name: name.clone() }),
    };
    let (request, socket) = match (request, socket_path(&args)) {
        (Ok(r), Ok(s)) => (r, s),
        (Err(e), _) | (_, Err(e)) => fail(2, e),
    };
    let reply = match Client::connect(&socket).and_then(|mut c| c.request(&request)) {
        Ok(r) => r,
        Err(e) => fail(1, e.to_string()),
    };
    if let Some(e) = &reply.error {
        fail(2, e.to_string());
    }
    match print(&args.op, &reply) {
        Ok(text) => {
            print!("{text}");
            Ok(())
        }
        Err(e) => fail(2, e),
    }
}

/// `--socket`, else `--config`'s `[daemon] control`, else the default.
fn socket_path(args: &ClassArgs) -> Result<PathBuf, String> {
    if let Some(p) = &args.socket {
        return Ok(p.clone());
    }
    let Some(file) = &args.config else {
        return Ok(PathBuf::from(DEFAULT_CONTROL));
    };
    let config = Config::load(file).map_err(|e| e.to_string())?;
    config
        .daemon
        .control
        .ok_or_else(|| format!("{}: [daemon] control is off (\"\")", file.display()))
}

/// The reply as the command prints it.
fn print(op: &ClassOp, reply: &Reply) -> Result<String, String> {
    match op {
        ClassOp::Add(f) | ClassOp::Change(f) => Ok(format!(
            "class {} {}: applied in {} us by {} loop(s)\n",
            f.name,
            if matches!(op, ClassOp::Add(_)) {
                "added"
            } else {
                "changed"
            },
            reply.applied_us.unwrap_or(0),
            reply.loops.unwrap_or(0)
        )),
        ClassOp::Del { name } => Ok(format!(
            "class {name} deleted: applied in {} us by {} loop(s); its queued packets leave at \
             its rate\n",
            reply.applied_us.unwrap_or(0),
            reply.loops.unwrap_or(0)
        )),
        ClassOp::List { json: true, .. } => Ok(pretty(&reply.classes)),
        ClassOp::List { toml: true, .. } => {
            let api: Vec<ClassObject> = reply
                .classes
                .iter()
                .flatten()
                .filter(|c| c.get("source").and_then(Value::as_str) == Some("api"))
                .cloned()
                .collect();
            protocol::to_toml(&api).map_err(|e| e.to_string())
        }
        ClassOp::List { .. } => Ok(tree_lines(reply.classes.as_deref().unwrap_or_default())),
        ClassOp::Show { json: true, .. } => Ok(pretty(&reply.class)),
        ClassOp::Show { .. } => Ok(reply.class.as_ref().map(line).unwrap_or_default()),
    }
}

/// One class as a tc-like line: `class NAME (SOURCE) match K V ... rate R pacing R burst B fair`.
fn line(c: &ClassObject) -> String {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut out = format!(
        "class {} ({})",
        c.get("name").map(text).unwrap_or_default(),
        c.get("source").map(text).unwrap_or_default()
    );
    if let Some(Value::Object(m)) = c.get("match") {
        out.push_str(" match");
        for (k, v) in m {
            out.push_str(&format!(" {k} {}", text(v)));
        }
    }
    // The policy's usual keys first, in tc's order, then the others.
    let usual = [
        "rate", "pacing", "burst", "fair", "parent", "weight", "gather",
    ];
    let others = c.keys().filter(|k| {
        !usual.contains(&k.as_str()) && !matches!(k.as_str(), "name" | "source" | "match")
    });
    let keys: Vec<&str> = usual
        .iter()
        .copied()
        .chain(others.map(String::as_str))
        .collect();
    for k in keys {
        let Some(v) = c.get(k) else { continue };
        match v {
            Value::Bool(true) => out.push_str(&format!(" {k}")),
            Value::Object(_) => out.push_str(&format!(" {k} {v}")),
            _ => out.push_str(&format!(" {k} {}", text(v))),
        }
    }
    out.push('\n');
    out
}

/// The classes as a tree, each under its parent and indented two spaces a level, in the order
/// the daemon lists them; a class whose parent is not listed stands at the top.
fn tree_lines(classes: &[ClassObject]) -> String {
    let name = |c: &ClassObject| {
        c.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let names: std::collections::HashSet<String> = classes.iter().map(name).collect();
    let parent = |c: &ClassObject| {
        c.get("parent")
            .and_then(Value::as_str)
            .filter(|p| names.contains(*p) && *p != name(c))
            .map(str::to_owned)
    };
    let mut children: std::collections::HashMap<String, Vec<usize>> = Default::default();
    let mut roots = Vec::new();
    for (i, c) in classes.iter().enumerate() {
        match parent(c) {
            Some(p) => children.entry(p).or_default().push(i),
            None => roots.push(i),
        }
    }
    let mut out = String::new();
    let mut shown = vec![false; classes.len()];
    // Depth-first, with an explicit stack: (class, level).
    let mut stack: Vec<(usize, usize)> = roots.into_iter().rev().map(|i| (i, 0)).collect();
    while let Some((i, level)) = stack.pop() {
        if std::mem::replace(&mut shown[i], true) {
            continue;
        }
        out.push_str(&"  ".repeat(level));
        out.push_str(&line(&classes[i]));
        if let Some(kids) = children.get(&name(&classes[i])) {
            stack.extend(kids.iter().rev().map(|&k| (k, level + 1)));
        }
    }
    // Classes of a loop (which the daemon refuses) are still shown.
    for (i, c) in classes.iter().enumerate() {
        if !shown[i] {
            out.push_str(&line(c));
        }
    }
    out
}

/// Pretty JSON of the daemon's objects, one trailing newline.
fn pretty<T: serde::Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flags_become_the_class_object_in_the_file_s_words() {
        let f = ClassFields {
            name: "t1".into(),
            matches: vec![
                "dst=10.0.0.1/32".into(),
                "protocol=udp".into(),
                "dst_port=5201".into(),
                "src_port=1000-2000".into(),
            ],
            rate: Some("10mbit".into()),
            pacing: None,
            burst: Some("15k".into()),
            fair: true,
            parent: None,
            weight: None,
            gather: false,
            unset: vec!["pacing".into()],
        };
        assert_eq!(
            Value::Object(f.object().unwrap()),
            json!({"name":"t1","match":{"dst":"10.0.0.1/32","protocol":"udp","dst_port":5201,
                   "src_port":"1000-2000"},"rate":"10mbit","burst":"15k","fair":true,
                   "pacing":null})
        );
        let bad = ClassFields {
            matches: vec!["dst".into()],
            ..f
        };
        assert!(bad.object().unwrap_err().contains("KEY=VALUE"));
    }

    #[test]
    fn a_class_prints_as_one_tc_like_line() {
        let Value::Object(c) = json!({"name":"t1","match":{"dst":"10.0.0.1/32"},
            "rate":"10mbit","fair":true,"source":"api"})
        else {
            unreachable!()
        };
        assert_eq!(
            line(&c),
            "class t1 (api) match dst 10.0.0.1/32 rate 10mbit fair\n"
        );
    }

    #[test]
    fn a_tree_lists_each_class_under_its_parent() {
        let objects: Vec<ClassObject> = [
            json!({"name":"tenant","rate":"300mbit","gather":true,"source":"file"}),
            json!({"name":"other","source":"file"}),
            json!({"name":"a","parent":"tenant","rate":"200mbit","source":"api"}),
            json!({"name":"a1","parent":"a","source":"api"}),
            json!({"name":"b","parent":"tenant","weight":2,"source":"api"}),
        ]
        .into_iter()
        .map(|v| match v {
            Value::Object(o) => o,
            _ => unreachable!(),
        })
        .collect();
        assert_eq!(
            tree_lines(&objects),
            "class tenant (file) rate 300mbit gather\n\
             \x20 class a (api) rate 200mbit parent tenant\n\
             \x20   class a1 (api) parent a\n\
             \x20 class b (api) parent tenant weight 2\n\
             class other (file)\n"
        );
    }
}
