//! A steady, bounded stream of DNS queries that measures gaps in the answers: RATE queries
//! a second for NAME (type A) from BIND to SERVER:53 for SECONDS (at most 65535 queries,
//! each with its own id), every reply matched to its query and checked to hold EXPECT.
//! Prints one JSON line when done: how many were sent, answered right, answered wrong and
//! lost, the longest time without a right answer (`longest_silence_ms`, the stream's
//! start and its last query counting as edges), the longest run of lost queries in ms
//! of sending time, where the losses were, and the longest pause between two of its own
//! sends (a silence no longer than that is the client's scheduling, not the server's).
//! Run inside a namespace.
//!
//! dns_stream BIND SERVER NAME EXPECT RATE SECONDS

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use director_tests::packets::{query, wire};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};

/// Replies still in flight when the last query went are read for this long.
const DRAIN: Duration = Duration::from_millis(500);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 7 {
        eprintln!("usage: dns_stream BIND SERVER NAME EXPECT RATE SECONDS");
        std::process::exit(2);
    }
    let bind: IpAddr = args[1].parse().expect("BIND is an address");
    let server: IpAddr = args[2].parse().expect("SERVER is an address");
    let name = &args[3];
    let expect: IpAddr = args[4].parse().expect("EXPECT is an address");
    let rate: f64 = args[5].parse().expect("RATE is a number");
    let seconds: f64 = args[6].parse().expect("SECONDS is a number");
    let count = (rate * seconds).round() as usize;
    assert!(
        (1..=65535).contains(&count) && seconds <= 120.0,
        "RATE × SECONDS must be 1 to 65535 queries, SECONDS at most 120"
    );
    // Not connected: an ICMP error (nothing answering at the host) must not turn into a
    // failed send or receive that would stop the stream.
    let sock = UdpSocket::bind(SocketAddr::new(bind, 0)).expect("binding");
    sock.set_nonblocking(true).expect("non-blocking");
    let to = SocketAddr::new(server, 53);
    let queries: Vec<Vec<u8>> = (0..count)
        .map(|i| wire(&query(i as u16, name, RecordType::A)))
        .collect();
    let step = Duration::from_secs_f64(1.0 / rate);
    let mut sent_at: Vec<Option<Duration>> = vec![None; count];
    let mut answered_at: Vec<Option<Duration>> = vec![None; count];
    let mut wrong = 0u64;
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    let mut read = |sent_at: &[Option<Duration>], answered_at: &mut [Option<Duration>]| {
        while let Ok((n, _)) = sock.recv_from(&mut buf) {
            let now = start.elapsed();
            let Ok(m) = Message::from_vec(&buf[..n]) else {
                wrong += 1;
                continue;
            };
            let id = m.id() as usize;
            if id >= count || sent_at[id].is_none() || answered_at[id].is_some() {
                continue;
            }
            let right = m.response_code() == ResponseCode::NoError
                && m.answers().iter().any(|r| match r.data() {
                    Some(RData::A(a)) => IpAddr::V4(a.0) == expect,
                    _ => false,
                });
            if right {
                answered_at[id] = Some(now);
            } else {
                wrong += 1;
            }
        }
    };
    let mut unsent = 0u64;
    for (i, q) in queries.iter().enumerate() {
        let due = step * i as u32;
        loop {
            let now = start.elapsed();
            if now >= due {
                break;
            }
            read(&sent_at, &mut answered_at);
            std::thread::sleep((due - now).min(Duration::from_micros(200)));
        }
        // A full socket buffer loses the query: counted apart, it is not director's loss.
        if sock.send_to(q, to).is_ok() {
            sent_at[i] = Some(start.elapsed());
        } else {
            unsent += 1;
        }
        read(&sent_at, &mut answered_at);
    }
    let last_sent = start.elapsed();
    let end = Instant::now() + DRAIN;
    while Instant::now() < end {
        read(&sent_at, &mut answered_at);
        std::thread::sleep(Duration::from_millis(2));
    }

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let sent = sent_at.iter().filter(|s| s.is_some()).count();
    let answered = answered_at.iter().filter(|a| a.is_some()).count();
    // The longest time without a right answer, between the first query and the last.
    let mut times: Vec<Duration> = answered_at.iter().flatten().copied().collect();
    times.sort();
    let mut edges = vec![Duration::ZERO];
    edges.extend(times.iter().copied().filter(|t| *t <= last_sent));
    edges.push(last_sent);
    let silence = edges
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .unwrap_or_default();
    // Runs of consecutive lost queries: (first one's sending time, how many).
    let mut runs: Vec<(Duration, usize)> = Vec::new();
    let mut in_run = false;
    for i in 0..count {
        match (sent_at[i], answered_at[i]) {
            (Some(t), None) => {
                if in_run {
                    if let Some(r) = runs.last_mut() {
                        r.1 += 1;
                    }
                } else {
                    runs.push((t, 1));
                    in_run = true;
                }
            }
            _ => in_run = false,
        }
    }
    let longest_loss = runs
        .iter()
        .map(|r| r.1 as f64 * ms(step))
        .fold(0.0, f64::max);
    let runs_json: Vec<String> = runs
        .iter()
        .take(20)
        .map(|(t, n)| format!("[{:.1},{n}]", ms(*t)))
        .collect();
    // The stream's own pauses (the sender not scheduled): a silence no longer than the
    // longest of these is the client's, not the server's.
    let mut sends: Vec<Duration> = sent_at.iter().flatten().copied().collect();
    sends.sort();
    let pause = sends
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .unwrap_or_default();
    let latency = sent_at
        .iter()
        .zip(&answered_at)
        .filter_map(|(s, a)| Some(a.as_ref()?.saturating_sub(*s.as_ref()?)))
        .max()
        .unwrap_or_default();
    println!(
        "{{\"sent\":{sent},\"unsent\":{unsent},\"answered\":{answered},\"wrong\":{wrong},\
         \"lost\":{},\"longest_silence_ms\":{:.2},\"longest_loss_ms\":{:.2},\
         \"longest_send_pause_ms\":{:.2},\"max_latency_ms\":{:.2},\"span_ms\":{:.1},\"loss_runs\":[{}]}}",
        sent - answered,
        ms(silence),
        longest_loss,
        ms(pause),
        ms(latency),
        ms(last_sent),
        runs_json.join(",")
    );
}
