//! The control socket: requests handled by the model and applied by every loop, the rules of
//! the file's classes and of reloads, and the socket itself (mode, a second daemon, a stale
//! socket).

use super::*;
use crate::datapath::engine::Engine;
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

const FILE: &str = "[interfaces]\ninside = \"a\"\noutside = \"b\"\n\
                    [[class]]\nname = \"bulk\"\nmatch = { protocol = \"tcp\" }\nrate = \"100mbit\"\n";

fn file() -> Config {
    Config::from_toml_str(FILE, "test.toml").unwrap()
}

fn object(v: Value) -> ClassObject {
    match v {
        Value::Object(o) => o,
        _ => unreachable!(),
    }
}

/// A shaping loop's stand-in: an engine applying what its inbox receives until `stop`.
fn spawn_loop(live: &Live, i: usize, n: usize, stop: &Arc<AtomicBool>) -> JoinHandle<Engine> {
    let mut endpoint = live.endpoint(i, n).unwrap();
    let stop = stop.clone();
    std::thread::spawn(move || {
        let mut engine = crate::driver::reload::test_engine(&file(), 64, &Metrics::new());
        while !stop.load(Ordering::Relaxed) {
            endpoint.poll(&mut engine);
            std::thread::sleep(StdDuration::from_micros(100));
        }
        engine
    })
}

struct Loops {
    live: Arc<Live>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Engine>>,
}

impl Loops {
    fn new(n: usize) -> Loops {
        let live = Live::new(&file(), n, Metrics::new()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n).map(|i| spawn_loop(&live, i, n, &stop)).collect();
        Loops {
            live,
            stop,
            threads,
        }
    }

    fn send(&self, request: Value) -> Reply {
        let line = serde_json::to_string(&request).unwrap();
        self.live
            .handle(Request::parse(&line).unwrap(), Instant::now())
    }

    fn stop(self) -> Vec<Engine> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect()
    }
}

#[test]
fn every_loop_applies_an_operation_before_the_reply() {
    let loops = Loops::new(2);
    let r = loops.send(json!({"op":"add","class":{
        "name":"t1","match":{"dst":"10.0.0.1/32"},"rate":"10mbit"}}));
    assert!(r.ok, "{r:?}");
    assert_eq!((r.loops, r.name.as_deref()), (Some(2), Some("t1")));
    assert!(r.applied_us.is_some());
    let r = loops.send(json!({"op":"add","class":{"name":"t2","pacing":"1mbit"}}));
    assert!(r.ok, "{r:?}");
    let r = loops.send(json!({"op":"change","class":{"name":"t1","rate":"20mbit"}}));
    assert!(r.ok, "{r:?}");
    // `change` kept the match; `list` shows the file's class, then the API's in order.
    let list = loops.send(json!({"op":"list"})).classes.unwrap();
    let names: Vec<&str> = list.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["bulk", "t1", "t2"]);
    assert_eq!(list[0]["source"], json!("file"));
    assert_eq!(list[1]["match"]["dst"], json!("10.0.0.1/32"));
    assert_eq!(list[1]["rate"], json!("20mbit"));
    let shown = loops.send(json!({"op":"show","name":"t2"})).class.unwrap();
    assert_eq!(shown["source"], json!("api"));
    assert!(loops.send(json!({"op":"del","name":"t2"})).ok);
    let engines = loops.stop();
    for e in &engines {
        assert!(e.class_index("t1").is_some());
        assert_eq!(e.class_index("t2"), None);
        e.invariants();
    }
}

#[test]
fn the_file_s_classes_are_edited_in_the_file_and_errors_name_the_field() {
    let loops = Loops::new(1);
    for request in [
        json!({"op":"add","class":{"name":"bulk","rate":"1mbit"}}),
        json!({"op":"change","class":{"name":"bulk","rate":"1mbit"}}),
        json!({"op":"del","name":"bulk"}),
    ] {
        let e = loops.send(request).error.unwrap();
        assert_eq!(e.field, "name");
        assert!(e.message.contains("edit the file and reload"), "{e}");
    }
    let e = |r: Value| loops.send(r).error.unwrap();
    assert_eq!(
        e(json!({"op":"add","class":{"name":"x","rate":"fast"}})).field,
        "rate"
    );
    assert_eq!(
        e(json!({"op":"add","class":{"name":"x","match":{"dscp":99}}})).field,
        "match.dscp"
    );
    assert_eq!(
        e(json!({"op":"add","class":{"rate":"1mbit"}})).field,
        "name"
    );
    assert_eq!(e(json!({"op":"del","name":"nobody"})).field, "name");
    assert_eq!(
        e(json!({"op":"add","class":{"name":"x","rate":"1mbit","ack_shaping":{"rate":"1mbit"}}}))
            .field,
        "ack_shaping"
    );
    assert!(
        loops
            .send(json!({"op":"add","class":{"name":"x","rate":"1mbit"}}))
            .ok
    );
    assert_eq!(
        e(json!({"op":"add","class":{"name":"x","rate":"2mbit"}})).field,
        "name"
    );
    // A refused change leaves the class as it was.
    assert_eq!(
        e(json!({"op":"change","class":{"name":"x","burst":"1"}})).field,
        "burst"
    );
    let shown = loops.send(json!({"op":"show","name":"x"})).class.unwrap();
    assert_eq!(shown.get("burst"), None);
    let encoded = loops.live.metrics.encode();
    assert!(
        encoded.contains("metronome_class_changes_total{op=\"add\",result=\"refused\"} 6"),
        "{encoded}"
    );
    loops.stop();
}

#[test]
fn a_reload_keeps_the_api_s_classes_but_the_file_wins_a_name() {
    let loops = Loops::new(1);
    for name in ["t1", "t2"] {
        let r = loops.send(json!({"op":"add","class":{"name":name,"rate":"1mbit"}}));
        assert!(r.ok, "{r:?}");
    }
    // The reloaded file defines t2: the file's class wins, t1 stays after the file's.
    let text = format!("{FILE}[[class]]\nname = \"t2\"\nrate = \"5mbit\"\n");
    let reloaded = Config::from_toml_str(&text, "test.toml").unwrap();
    let merged = loops.live.merged(&reloaded);
    let names: Vec<&str> = merged.classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["bulk", "t2", "t1"]);
    assert_eq!(
        merged.classes[1].policy.rate,
        Some(metronome_core::Rate::mbps(5))
    );
    loops.live.reloaded(&reloaded);
    let e = loops.send(json!({"op":"del","name":"t2"})).error.unwrap();
    assert!(e.message.contains("edit the file"), "{e}");
    assert!(loops
        .live
        .metrics
        .encode()
        .contains("metronome_class_changes_total{op=\"reload\",result=\"shadowed\"} 1"));
    // Nothing else is forgotten: t1 is still the API's.
    assert!(loops.send(json!({"op":"del","name":"t1"})).ok);
    loops.stop();
}

#[test]
fn the_socket_is_the_owner_s_a_second_daemon_is_refused_and_a_stale_one_replaced() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("mtr-control-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("run").join("control.sock");
    let listener = ControlServer::bind(&path, None).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    let loops = Loops::new(1);
    let server = ControlServer::serve(listener, &path, loops.live.clone(), None);
    // A second daemon on the same path is refused, naming it.
    let e = ControlServer::bind(&path, None).unwrap_err();
    assert!(matches!(e, ControlError::InUse(_)), "{e}");
    assert!(e.to_string().contains(&path.display().to_string()));
    // Requests in turn on one connection.
    let mut client = Client::connect(&path).unwrap();
    let r = client
        .add(object(json!({"name":"t","rate":"3mbit"})))
        .unwrap();
    assert!(r.ok, "{r:?}");
    assert_eq!(client.list().unwrap().classes.unwrap().len(), 2);
    assert!(!client.show("nobody").unwrap().ok);
    drop(client);
    drop(server);
    assert!(!path.exists());
    assert!(matches!(
        Client::connect(&path),
        Err(ClientError::NotRunning { .. })
    ));
    // A socket file nobody listens on (a daemon killed) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let again = ControlServer::bind(&path, None).unwrap();
    drop(again);
    loops.stop();
    // With `[daemon] user`, the socket and the directory made for it are that user's (giving a
    // file away needs CAP_CHOWN, which root has).
    let may_chown = caps::has_cap(None, caps::CapSet::Effective, caps::Capability::CAP_CHOWN);
    if may_chown.unwrap_or(false) {
        use std::os::unix::fs::MetadataExt;
        let owned = dir.join("user").join("control.sock");
        let listener = ControlServer::bind(&owned, Some((65_534, 65_534))).unwrap();
        for p in [owned.as_path(), owned.parent().unwrap()] {
            let m = std::fs::metadata(p).unwrap();
            assert_eq!((m.uid(), m.gid()), (65_534, 65_534), "{}", p.display());
        }
        drop(listener);
    } else {
        crate::os::privileged_tests::skip_unprivileged(
            "the socket's owner: giving a file away needs CAP_CHOWN (root has it)",
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_api_s_classes_keep_their_order_through_changes_deletes_and_a_reload() {
    let file = file();
    let api = |name: &str, dst: &str| {
        let object = object(json!({"name": name, "match": {"dst": dst}, "rate": "1mbit"}));
        ApiClass {
            class: validated(&file, &object).unwrap(),
            object,
        }
    };
    let names = |a: &ApiClasses| a.iter().map(|c| c.class.name.clone()).collect::<Vec<_>>();
    let mut classes = ApiClasses::default();
    for (i, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
        classes.push(api(name, &format!("10.0.0.{i}/32")));
    }
    // A change in place keeps the order; a new match moves the class last.
    classes.replace(api("b", "10.0.0.1/32"));
    assert_eq!(names(&classes), ["a", "b", "c", "d"]);
    classes.push(api("a", "10.0.9.9/32"));
    assert_eq!(names(&classes), ["b", "c", "d", "a"]);
    assert!(classes.remove("c").is_some() && classes.remove("c").is_none());
    classes.retain(|c| c.class.name != "d");
    assert_eq!(names(&classes), ["b", "a"]);
    assert_eq!(classes.len(), 2);
    assert!(classes.contains("b") && !classes.contains("d"));
    assert!(classes
        .get("a")
        .is_some_and(|c| c.object["match"]["dst"] == "10.0.9.9/32"));
}

const ATTACH: &str = "[interfaces]\nattach = [\"eth0\"]\nbridges = [\"br0\"]\norigin_mark = 0x3\n\
                      [[class]]\nname = \"pod-a.out\"\nmatch = { from = \"veth-a\" }\nrate = \"10mbit\"\n";

/// A model of `text` with one stand-in loop (an engine of `text` applying the inbox).
fn attach_loop(text: &str) -> (Arc<Live>, Arc<AtomicBool>, JoinHandle<Engine>) {
    let config = Config::from_toml_str(text, "test.toml").unwrap();
    let live = Live::new(&config, 1, Metrics::new()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut endpoint = live.endpoint(0, 1).unwrap();
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut engine = crate::driver::reload::test_engine(&config, 64, &Metrics::new());
        while !flag.load(Ordering::Relaxed) {
            endpoint.poll(&mut engine);
            std::thread::sleep(StdDuration::from_micros(100));
        }
        engine
    });
    (live, stop, thread)
}

fn send(live: &Live, request: Value) -> Reply {
    let line = serde_json::to_string(&request).unwrap();
    live.handle(Request::parse(&line).unwrap(), Instant::now())
}

#[test]
fn live_origins_take_stable_tags_and_tell_the_watcher() {
    let (live, stop, thread) = attach_loop(ATTACH);
    assert!(!live.take_origins_changed());
    let r = send(
        &live,
        json!({"op":"add","class":{"name":"pod-a.in","match":{"to":"veth-a"},"rate":"5mbit"}}),
    );
    assert!(r.ok, "{r:?}");
    assert!(live.take_origins_changed());
    let o = live.current().origin_set();
    assert_eq!(
        (o.from.get("veth-a"), o.to.get("veth-a")),
        (Some(&1), Some(&2))
    );
    // A name in force keeps its tag: a second class on veth-a's `from` shares tag 1.
    let r = send(
        &live,
        json!({"op":"add","class":{"name":"pod-a.udp","match":{"from":"veth-a","protocol":"udp"}}}),
    );
    assert!(r.ok, "{r:?}");
    let tags: Vec<Option<u16>> = live
        .current()
        .classes
        .iter()
        .map(|c| c.matcher.origin)
        .collect();
    assert_eq!(tags, [Some(1), Some(2), Some(1)]);
    // The mark's two bits carry tags 1 and 2 (3 is reserved): tag 2 is the `to`'s, so a
    // second `from` finds none free.
    let r = send(
        &live,
        json!({"op":"add","class":{"name":"pod-b.out","match":{"from":"veth-b"}}}),
    );
    assert!(!r.ok);
    assert_eq!(r.error.unwrap().field, "match.from");
    // Deleting the `to` class frees its tag and its origin.
    assert!(send(&live, json!({"op":"del","name":"pod-a.in"})).ok);
    assert!(live.take_origins_changed());
    assert!(live.current().origin_set().to.is_empty());
    let r = send(
        &live,
        json!({"op":"add","class":{"name":"pod-b.out","match":{"from":"veth-b"}}}),
    );
    assert!(r.ok, "{r:?}");
    assert_eq!(live.current().origin_set().from.get("veth-b"), Some(&2));
    // A reload that adds a `from` keeps the tags in force: the new one takes a free tag.
    let reloaded = Config::from_toml_str(
        &ATTACH
            .replace("origin_mark = 0x3", "origin_mark = 0x7")
            .replace(
                "[[class]]",
                "[[class]]\nname = \"pod-c.out\"\nmatch = { from = \"veth-c\" }\n[[class]]",
            ),
        "test.toml",
    )
    .unwrap();
    assert_eq!(reloaded.classes[0].matcher.origin, Some(1));
    let merged = live.merged_checked(&reloaded).unwrap();
    let o = merged.origin_set();
    assert_eq!(o.from.get("veth-a"), Some(&1));
    assert_eq!(o.from.get("veth-b"), Some(&2));
    assert_eq!(o.from.get("veth-c"), Some(&3));
    live.reloaded(&reloaded);
    assert_eq!(live.current().origin_set(), o);
    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap();
}

#[test]
fn a_live_to_needs_a_bridge() {
    let text = "[interfaces]\nattach = [\"eth0\"]\n";
    let (live, stop, thread) = attach_loop(text);
    let r = send(
        &live,
        json!({"op":"add","class":{"name":"x","match":{"to":"veth-a"}}}),
    );
    assert!(!r.ok);
    let e = r.error.unwrap();
    assert_eq!(e.field, "match.to", "{e:?}");
    assert!(e.message.contains("bridges"), "{e:?}");
    let r = send(
        &live,
        json!({"op":"add","class":{"name":"y","match":{"cgroup":"/system.slice/a.service"}}}),
    );
    assert!(r.ok, "{r:?}");
    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap();
}

/// A fresh directory for one socket test, searchable by every user.
fn socket_dir(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("mtr-control-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// One reply line read off `stream`.
fn reply_line(stream: &UnixStream) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(stream)
        .read_line(&mut line)
        .unwrap();
    line
}

#[test]
fn idle_clients_cannot_hold_the_socket_and_every_malformed_request_is_answered() {
    let dir = socket_dir("idle");
    let path = dir.join("control.sock");
    let listener = ControlServer::bind(&path, None).unwrap();
    let loops = Loops::new(1);
    let metrics = loops.live.metrics.clone();
    let server = ControlServer::serve(listener, &path, loops.live.clone(), None);
    // Sixteen clients that each sent part of a request and wait.
    let idle: Vec<UnixStream> = (0..MAX_CONNECTIONS)
        .map(|_| {
            let mut s = UnixStream::connect(&path).unwrap();
            s.write_all(br#"{"op":"li"#).unwrap();
            s
        })
        .collect();
    // The seventeenth is served, well before any idle one's read deadline runs out: the
    // oldest idle one gave it its place.
    let started = Instant::now();
    let mut client = Client::connect(&path).unwrap();
    let r = client.list().unwrap();
    let took = started.elapsed();
    assert!(r.ok, "{r:?}");
    assert!(took < READ_DEADLINE, "served after {took:?}");
    eprintln!("the 17th client was answered in {took:?}");
    let closed = reply_line(&idle[0]);
    assert!(closed.contains("idle"), "{closed}");
    let text = metrics.encode();
    assert!(
        text.contains(r#"metronome_control_refused_total{reason="idle"} 1"#),
        "{text}"
    );
    // A request that is not UTF-8 gets an answer, and the connection serves the next one.
    let mut raw = UnixStream::connect(&path).unwrap();
    raw.write_all(b"{\"op\":\"list\xff\"}\n").unwrap();
    let refused: Reply = serde_json::from_str(&reply_line(&raw)).unwrap();
    assert!(!refused.ok);
    let message = refused.error.unwrap().message;
    assert!(message.contains("UTF-8"), "{message}");
    raw.write_all(b"{\"op\":\"list\"}\n").unwrap();
    let listed: Reply = serde_json::from_str(&reply_line(&raw)).unwrap();
    assert!(listed.ok, "{listed:?}");
    assert!(metrics
        .encode()
        .contains(r#"metronome_control_refused_total{reason="malformed"} 1"#));
    drop((idle, raw, client));
    drop(server);
    loops.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The socket [`connect_as_another_user`] connects to.
const PEER_SOCKET_ENV: &str = "METRONOME_TEST_PEER_SOCKET";

/// Not a test of its own: the client that `a_peer_neither_root_nor_the_daemon_s_user_is_refused`
/// runs as another user. Sends `list` to the socket [`PEER_SOCKET_ENV`] names and prints the
/// reply after `REPLY:`.
#[test]
#[ignore = "a helper: run as another user by a_peer_neither_root_nor_the_daemon_s_user_is_refused"]
fn connect_as_another_user() {
    let path = std::env::var_os(PEER_SOCKET_ENV).expect("METRONOME_TEST_PEER_SOCKET");
    let mut stream = UnixStream::connect(path).unwrap();
    // A refused peer's connection is closed at once: the write may find it closed, the refusal
    // is read all the same.
    let _ = stream.write_all(b"{\"op\":\"list\"}\n");
    println!("REPLY:{}", reply_line(&stream).trim_end());
}

#[test]
fn a_peer_neither_root_nor_the_daemon_s_user_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = socket_dir("peer");
    let path = dir.join("control.sock");
    let listener = ControlServer::bind(&path, None).unwrap();
    let loops = Loops::new(1);
    let metrics = loops.live.metrics.clone();
    let server = ControlServer::serve(listener, &path, loops.live.clone(), None);
    // The socket made reachable by hand: its mode no longer keeps others out.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    // A client of uid 65534: this test binary again, copied where that user may run it,
    // running `connect_as_another_user`.
    let exe = dir.join("client");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    use std::os::unix::process::CommandExt;
    let answer = std::process::Command::new(&exe)
        .args([
            "--ignored",
            "--exact",
            "ops::control::tests::connect_as_another_user",
            "--nocapture",
        ])
        .env(PEER_SOCKET_ENV, &path)
        .uid(65_534)
        .gid(65_534)
        .output()
        .map_err(|e| e.to_string())
        .and_then(|out| {
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.lines()
                .find_map(|l| l.strip_prefix("REPLY:").map(str::to_owned))
                .ok_or(format!(
                    "no reply: {text} {}",
                    String::from_utf8_lossy(&out.stderr)
                ))
        });
    match answer {
        Ok(line) => {
            let reply: Reply =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert!(!reply.ok, "{reply:?}");
            let message = reply.error.unwrap().message;
            assert!(
                message.contains("uid 65534 may not use this socket"),
                "{message}"
            );
            assert!(metrics
                .encode()
                .contains(r#"metronome_control_refused_total{reason="peer"} 1"#));
        }
        Err(e) if !nix::unistd::geteuid().is_root() => {
            crate::os::privileged_tests::skip_unprivileged(&format!(
                "a peer of another uid: running a client as uid 65534 needs root: {e}"
            ))
        }
        Err(e) => panic!("the client of uid 65534 did not run: {e}"),
    }
    // Root is served.
    assert!(Client::connect(&path).unwrap().list().unwrap().ok);
    drop(server);
    loops.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_parent_with_children_is_not_deleted_and_stays_in_the_model() {
    let loops = Loops::new(2);
    let r = loops.send(json!({"op":"add","class":{"name":"ns","gather":true,"rate":"100mbit"}}));
    assert!(r.ok, "{r:?}");
    for child in ["a", "b"] {
        let r = loops.send(json!({"op":"add","class":{"name":child,"parent":"ns",
            "match":{"dst":"10.0.0.1/32"},"rate":"10mbit"}}));
        assert!(r.ok, "{r:?}");
    }
    let e = loops.send(json!({"op":"del","name":"ns"})).error.unwrap();
    assert_eq!(e.field, "name");
    assert!(e.message.contains("has 2 children"), "{e}");
    // Still there, for `show` and for the loops: its last child's delete lets it go.
    let shown = loops.send(json!({"op":"show","name":"ns"}));
    assert_eq!(shown.class.unwrap()["gather"], json!(true));
    assert!(loops.send(json!({"op":"del","name":"a"})).ok);
    assert!(!loops.send(json!({"op":"del","name":"ns"})).ok);
    assert!(loops.send(json!({"op":"del","name":"b"})).ok);
    let r = loops.send(json!({"op":"del","name":"ns"}));
    assert!(r.ok, "{r:?}");
    for e in &loops.stop() {
        assert_eq!(e.class_index("ns"), None);
        e.invariants();
    }
}

#[test]
fn the_api_s_classes_stop_at_max_api_classes() {
    let text = format!("{FILE}[daemon]\nmax_api_classes = 2\n");
    let config = Config::from_toml_str(&text, "test.toml").unwrap();
    let live = Live::new(&config, 1, Metrics::new()).unwrap();
    for name in ["a", "b"] {
        live.restore(object(json!({"name": name, "rate": "1mbit"})))
            .unwrap();
    }
    let e = live
        .restore(object(json!({"name": "c", "rate": "1mbit"})))
        .unwrap_err();
    assert!(e.message.contains("max_api_classes"), "{e}");
    assert_eq!(live.api_classes(), 2);
}

#[test]
fn a_connection_without_a_whole_request_is_closed_at_the_read_deadline() {
    let dir = socket_dir("deadline");
    let path = dir.join("control.sock");
    let listener = ControlServer::bind(&path, None).unwrap();
    let loops = Loops::new(1);
    let metrics = loops.live.metrics.clone();
    let server = ControlServer::serve(listener, &path, loops.live.clone(), None);
    // A client that asked once and waits, beside one that sent part of a request.
    let mut client = Client::connect(&path).unwrap();
    assert!(client.list().unwrap().ok);
    let mut stream = UnixStream::connect(&path).unwrap();
    stream.write_all(br#"{"op":"li"#).unwrap();
    let started = Instant::now();
    let closed = reply_line(&stream);
    assert!(started.elapsed() >= READ_DEADLINE / 2, "{closed}");
    assert!(closed.contains("no whole request within"), "{closed}");
    let both = r#"metronome_control_refused_total{reason="deadline"} 2"#;
    while !metrics.encode().contains(both) {
        std::thread::sleep(StdDuration::from_millis(10));
    }
    // The client's connection was closed too: its next request goes on a new one.
    let r = client.list().unwrap();
    assert!(r.ok, "{r:?}");
    drop(server);
    loops.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn classes_of_the_socket_build_a_tree_under_the_file_s_classes() {
    let loops = Loops::new(2);
    let ok = |v: Value| {
        let r = loops.send(v);
        assert!(r.ok, "{r:?}");
    };
    let refused = |v: Value| loops.send(v).error.unwrap();
    ok(json!({"op":"add","class":{"name":"ns","gather":true,"rate":"50mbit","parent":"bulk"}}));
    ok(
        json!({"op":"add","class":{"name":"pod1","match":{"dst":"10.0.0.1/32"},
        "rate":"20mbit","parent":"ns"}}),
    );
    ok(
        json!({"op":"add","class":{"name":"pod2","match":{"dst":"10.0.0.2/32"},
        "parent":"ns","weight":3}}),
    );
    let e = refused(json!({"op":"add","class":{"name":"x","parent":"nobody"}}));
    assert_eq!(e.field, "parent", "{e:?}");
    let e = refused(json!({"op":"add","class":{"name":"x","rate":"60mbit","parent":"ns"}}));
    assert!(
        e.field == "rate" && e.message.contains("could never apply"),
        "{e:?}"
    );
    let e = refused(json!({"op":"change","class":{"name":"ns","parent":"pod1"}}));
    assert!(
        e.field == "parent" && e.message.contains("own ancestor"),
        "{e:?}"
    );
    let e = refused(json!({"op":"change","class":{"name":"ns","rate":"10mbit"}}));
    assert!(e.field == "rate" && e.message.contains("pod1"), "{e:?}");
    let e = refused(json!({"op":"del","name":"ns"}));
    assert!(
        e.field == "name" && e.message.contains("2 children"),
        "{e:?}"
    );
    // Moved to the top, pod2 leaves ns; ns goes once its children did.
    let e = refused(json!({"op":"change","class":{"name":"pod2","parent":null}}));
    assert!(e.field == "weight" && e.message.contains("parent"), "{e:?}");
    ok(json!({"op":"change","class":{"name":"pod2","parent":null,"weight":null}}));
    ok(json!({"op":"del","name":"pod1"}));
    ok(json!({"op":"del","name":"ns"}));
    let list = loops.send(json!({"op":"list"})).classes.unwrap();
    let names: Vec<&str> = list.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["bulk", "pod2"]);
    for e in loops.stop() {
        assert_eq!(e.class_index("ns"), None);
        assert!(e.class_index("pod2").is_some());
        e.invariants();
    }
}
