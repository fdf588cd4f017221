//! The listener on loopback: a "router" writes hand-built BMP messages in odd chunks.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use director_plan::inputs::bmp::encode::{ann, eor, initiation, peer, peer_up, route};
use director_plan::inputs::bmp::{Collector, Policy, Settings, ViewSpec};

use super::{Admit, Listener};
use crate::api::Log;

fn loopback() -> Admit {
    Admit {
        allow: vec!["127.0.0.1/32".parse().unwrap()],
        max_sessions: 8,
    }
}

/// A connection to `to` from the loopback address `from`.
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(from.parse().unwrap(), 0).into())
        .unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

/// Whether the listener closed `s` without reading: the next read sees the end (or a
/// reset), not a timeout.
fn closed(mut s: TcpStream) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 16];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn bmp_listener_feeds_the_collector_and_marks_stale_on_disconnect() {
    let collector = Arc::new(Mutex::new(Collector::new(Settings::default())));
    let changes = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&changes);
    let listener = Listener::start(
        "127.0.0.1:0".parse().unwrap(),
        loopback(),
        Arc::clone(&collector),
        move || {
            seen.fetch_add(1, Ordering::SeqCst);
        },
        Log::Text,
    )
    .unwrap();
    let a = peer("10.0.0.1", 65001, Policy::Pre);
    let prefixes: Vec<String> = (0..200)
        .map(|i| format!("10.{}.{}.0/24", i / 256, i % 256))
        .collect();
    let mut stream: Vec<u8> = [initiation("lab-r1"), peer_up(&a, 65000, &[1])].concat();
    for chunk in prefixes.chunks(7) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        stream.extend(route(&a, &ann(&refs, &[65000, 65001, 9])));
    }
    stream.extend(eor(&a, false));
    let mut client = TcpStream::connect(listener.local_addr()).unwrap();
    // Odd chunk sizes, with pauses so that the reader sees them as separate reads.
    let mut at = 0;
    for (n, size) in [1usize, 5, 7, 13, 64, 333, 1000].iter().cycle().enumerate() {
        if at >= stream.len() {
            break;
        }
        let end = (at + size).min(stream.len());
        client.write_all(&stream[at..end]).unwrap();
        at = end;
        if n % 5 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let router: IpAddr = "127.0.0.1".parse().unwrap();
    let lock = || collector.lock().unwrap();
    wait_for("the End-of-RIB", || lock().synced(router));
    let view = ViewSpec::parse("lab-r1", None, None).unwrap();
    let table = lock().table(&view);
    assert_eq!(table.len(), 200);
    assert!(table
        .iter()
        .all(|(_, r)| r.path_len == 2 && r.neighbor_as == 65001));
    let calls = changes.load(Ordering::SeqCst);
    assert!(
        (1..100).contains(&calls),
        "on_change once per read, not per message: {calls}"
    );
    // Disconnect: stale, still counted.
    drop(client);
    wait_for("the session to end", || {
        !lock().status(Instant::now())[0].connected
    });
    assert_eq!(lock().table(&view).len(), 200);
    assert!(!lock().synced(router));
    // A broken stream ends the session too.
    let mut bad = TcpStream::connect(listener.local_addr()).unwrap();
    wait_for("the new session", || {
        lock().status(Instant::now())[0].connected
    });
    bad.write_all(&[9, 0, 0, 0, 6, 4]).unwrap();
    wait_for("the bad session to end", || {
        !lock().status(Instant::now())[0].connected
    });
    // Binding an address in use names it.
    let taken: SocketAddr = listener.local_addr();
    let e = Listener::start(taken, loopback(), Arc::clone(&collector), || {}, Log::Text)
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains(&taken.to_string()), "{e:#}");
}

#[test]
fn sessions_from_addresses_not_allowed_or_past_the_cap_are_closed_unread() {
    let collector = Arc::new(Mutex::new(Collector::new(Settings::default())));
    let admit = Admit {
        allow: vec![
            "127.0.0.1/32".parse().unwrap(),
            "127.0.0.2/32".parse().unwrap(),
        ],
        max_sessions: 1,
    };
    let listener = Listener::start(
        "127.0.0.1:0".parse().unwrap(),
        admit,
        Arc::clone(&collector),
        || {},
        Log::Text,
    )
    .unwrap();
    let to = listener.local_addr();
    let a = peer("10.0.0.1", 65001, Policy::Pre);
    let dump = [
        initiation("intruder"),
        peer_up(&a, 65000, &[1]),
        route(&a, &ann(&["10.9.0.0/24"], &[65000, 65001])),
        eor(&a, false),
    ]
    .concat();
    let lock = || collector.lock().unwrap();
    // Not listed: closed, nothing of it reaches the collector.
    let mut intruder = connect_from("127.0.0.3", to);
    let _ = intruder.write_all(&dump);
    assert!(closed(intruder), "a session not allowed stays open");
    assert_eq!(listener.refused(), (1, 0));
    assert!(lock().status(Instant::now()).is_empty());
    // Listed: taken.
    let mut first = connect_from("127.0.0.1", to);
    first.write_all(&dump).unwrap();
    let r1: IpAddr = "127.0.0.1".parse().unwrap();
    wait_for("the listed router's End-of-RIB", || lock().synced(r1));
    // Listed too, but past the cap of one session.
    let second = connect_from("127.0.0.2", to);
    assert!(closed(second), "a session past the cap stays open");
    assert_eq!(listener.refused(), (1, 1));
    // The same router reconnecting replaces its session: not past the cap.
    let mut again = connect_from("127.0.0.1", to);
    again.write_all(&dump).unwrap();
    wait_for("the reconnected router's End-of-RIB", || lock().synced(r1));
    assert_eq!(listener.refused(), (1, 1));
    drop(first);
}
