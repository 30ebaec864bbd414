//! Delay and reordering of real packets without `netem` (this kernel has none): every packet a
//! node's namespace sends to the cluster is queued to user space (iptables `NFQUEUE`), held for
//! a random 50–150 ms (say), and let go — so packets overtake each other as on a real network.
//! One thread per namespace, entered with `setns`; the queue fails open (a packet nobody holds
//! goes on), and dropping the [`Delayer`] lets every held packet go.
//!
//! A delayer never stops quietly (issue 39): the errors a queue reports in normal operation — a
//! late verdict (`ENOENT`: the fail-open queue let the packet through when it was full) and a
//! full netlink socket (`ENOBUFS`) — are counted and it goes on; any other error, or a thread
//! that ends while the run goes on, is recorded, and [`Delayer::health`] says so, naming the
//! namespace, so the run fails at once instead of carrying on undelayed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nfq::{Queue, Verdict};

/// Delaying threads, one per namespace; stopped and joined on drop.
pub struct Delayer {
    stop: Arc<AtomicBool>,
    threads: Vec<(String, JoinHandle<()>)>,
    stats: Arc<Stats>,
    kill: KillSwitch,
}

/// Packets the kernel keeps queued for one namespace's delayer (held or not yet read) before
/// the queue fails open and lets further packets through undelayed.
pub const QUEUE_LEN: u32 = 4096;

/// What the delaying threads did so far, summed over namespaces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DelayCounts {
    /// Packets read from the queues.
    pub received: u64,
    /// Packets let go after their hold (a late verdict included).
    pub held: u64,
    /// Verdicts the kernel answered with `ENOENT`: it no longer held the packet.
    pub late_verdicts: u64,
    /// `ENOBUFS` from a queue socket: the kernel could not hand over messages (those packets
    /// went on undelayed, the queue failing open).
    pub overflows: u64,
}

/// Stops one delaying thread as a crash would (a test's hook, to show that a run notices).
#[derive(Clone, Debug, Default)]
pub struct KillSwitch(Vec<(String, Arc<AtomicBool>)>);

impl KillSwitch {
    /// Makes the delaying thread of namespace `ns` panic at its next turn; false when no thread
    /// delays `ns`.
    pub fn kill(&self, ns: &str) -> bool {
        let found = self.0.iter().find(|(name, _)| name == ns);
        if let Some((_, flag)) = found {
            flag.store(true, Ordering::Relaxed);
        }
        found.is_some()
    }
}

/// Holds are counted per millisecond up to this; longer ones in the last bucket.
const HOLD_BUCKETS: usize = 1_001;

/// What the delaying threads did, summed over namespaces.
struct Stats {
    received: AtomicU64,
    held: AtomicU64,
    late_verdicts: AtomicU64,
    overflows: AtomicU64,
    hold_ms_total: AtomicU64,
    hold_ms_max: AtomicU64,
    /// Packets by how long they were held, in whole milliseconds.
    hold_ms: Vec<AtomicU64>,
    /// The first error that stopped a thread, with its namespace.
    failed: Mutex<Option<String>>,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            received: AtomicU64::new(0),
            held: AtomicU64::new(0),
            late_verdicts: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            hold_ms_total: AtomicU64::new(0),
            hold_ms_max: AtomicU64::new(0),
            hold_ms: (0..HOLD_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            failed: Mutex::new(None),
        }
    }
}

impl Stats {
    fn record_hold(&self, ms: u64) {
        self.held.fetch_add(1, Ordering::Relaxed);
        self.hold_ms_total.fetch_add(ms, Ordering::Relaxed);
        self.hold_ms_max.fetch_max(ms, Ordering::Relaxed);
        let bucket = (ms as usize).min(HOLD_BUCKETS - 1);
        self.hold_ms[bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// The hold at percentile `p` (0–100), in whole milliseconds (0 with nothing held).
    fn hold_percentile(&self, p: u64) -> u64 {
        let held = self.held.load(Ordering::Relaxed);
        let rank = (held * p).div_ceil(100).max(1);
        let mut seen = 0;
        for (ms, n) in self.hold_ms.iter().enumerate() {
            seen += n.load(Ordering::Relaxed);
            if seen >= rank {
                return ms as u64;
            }
        }
        0
    }
}

/// What an error from the queue means.
#[derive(Debug, PartialEq, Eq)]
enum QueueError {
    /// Nothing to read now.
    Empty,
    /// A verdict for a packet the kernel no longer holds: counted.
    LateVerdict,
    /// The netlink socket overflowed (messages were lost, the queue fails open): counted.
    Overflow,
    /// Anything else: the thread stops and the run must fail.
    Fatal,
}

fn classify(e: &std::io::Error) -> QueueError {
    if e.kind() == std::io::ErrorKind::WouldBlock {
        return QueueError::Empty;
    }
    match e.raw_os_error() {
        Some(nix::libc::ENOENT) => QueueError::LateVerdict,
        Some(nix::libc::ENOBUFS) => QueueError::Overflow,
        _ => QueueError::Fatal,
    }
}

impl Delayer {
    /// Holds every packet queued to queue 0 in each namespace of `namespaces` for a uniformly
    /// random `min_ms..=max_ms`. Returns once every thread listens.
    pub fn start(namespaces: &[String], min_ms: u64, max_ms: u64) -> Delayer {
        Delayer::start_with_queue_len(namespaces, min_ms, max_ms, QUEUE_LEN)
    }

    /// [`Delayer::start`] with queues of `queue_len` packets instead of [`QUEUE_LEN`] (a test
    /// overflows a tiny one).
    pub fn start_with_queue_len(
        namespaces: &[String],
        min_ms: u64,
        max_ms: u64,
        queue_len: u32,
    ) -> Delayer {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Stats::default());
        let mut threads = Vec::new();
        let mut kill = KillSwitch::default();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        for (k, ns) in namespaces.iter().enumerate() {
            let killed = Arc::new(AtomicBool::new(false));
            kill.0.push((ns.clone(), killed.clone()));
            let (name, stop, ready, stats) =
                (ns.clone(), stop.clone(), ready_tx.clone(), stats.clone());
            let thread = std::thread::spawn(move || {
                let queue = open_in(&name, queue_len);
                ready.send(()).expect("ready");
                let seed = 0x9E37_79B9_7F4A_7C15 ^ k as u64;
                let turn = Turn {
                    stop: &stop,
                    killed: &killed,
                    ns: &name,
                };
                if let Err(e) = hold(queue, &turn, min_ms, max_ms, seed, &stats) {
                    let mut failed = stats.failed.lock().unwrap_or_else(|p| p.into_inner());
                    failed.get_or_insert(format!("the delayer of {name}: netfilter queue: {e}"));
                }
            });
            threads.push((ns.clone(), thread));
        }
        for _ in namespaces {
            ready_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("a delaying thread failed to start (see its panic)");
        }
        Delayer {
            stop,
            threads,
            stats,
            kill,
        }
    }

    /// A handle that stops one delaying thread as a crash would (see [`KillSwitch`]).
    pub fn kill_switch(&self) -> KillSwitch {
        self.kill.clone()
    }

    /// What the delaying threads did so far.
    pub fn counts(&self) -> DelayCounts {
        let s = &self.stats;
        DelayCounts {
            received: s.received.load(Ordering::Relaxed),
            held: s.held.load(Ordering::Relaxed),
            late_verdicts: s.late_verdicts.load(Ordering::Relaxed),
            overflows: s.overflows.load(Ordering::Relaxed),
        }
    }

    /// `Err` naming the namespace once a delaying thread stopped (an error it could not go on
    /// from, or a panic) while the delay is meant to be in force.
    pub fn health(&self) -> Result<(), String> {
        let failed = self.stats.failed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = failed.as_ref() {
            return Err(e.clone());
        }
        match self.threads.iter().find(|(_, t)| t.is_finished()) {
            Some((ns, _)) => Err(format!("the delayer of {ns} stopped (see its panic)")),
            None => Ok(()),
        }
    }

    /// One line: packets held, their hold percentiles, and the queue errors counted.
    pub fn summary(&self) -> String {
        let s = &self.stats;
        let held = s.held.load(Ordering::Relaxed);
        let mean = s.hold_ms_total.load(Ordering::Relaxed) / held.max(1);
        format!(
            "delayer: {held} packets held, mean {mean} ms, p50 {} ms, p90 {} ms, p99 {} ms, longest {} ms; {} late verdicts, {} socket overflows",
            s.hold_percentile(50),
            s.hold_percentile(90),
            s.hold_percentile(99),
            s.hold_ms_max.load(Ordering::Relaxed),
            s.late_verdicts.load(Ordering::Relaxed),
            s.overflows.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Delayer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for (_, t) in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Enters namespace `ns` (this thread only) and binds its queue 0.
fn open_in(ns: &str, queue_len: u32) -> Queue {
    let file = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("namespace file");
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
    let mut q = Queue::open().expect("netfilter queue socket");
    q.bind(0).expect("bind queue 0");
    // Only the verdict matters: no payload copied, and a full queue lets packets through.
    q.set_copy_range(0, 0).expect("copy range");
    q.set_fail_open(0, true).expect("fail open");
    // A segmentation-offloaded packet comes whole, as it matched the queue's rule (else the
    // kernel splits it, and the rule's count no longer says how many packets were queued).
    q.set_recv_gso(0, true).expect("GSO packets whole");
    q.set_queue_max_len(0, queue_len).expect("queue length");
    // The crate turns ENOBUFS off; on, an overflowing socket is counted (see `classify`).
    q.set_recv_enobufs(true).expect("ENOBUFS reported");
    q.set_nonblocking(true);
    q
}

/// Whether a delaying thread is to go on: the delayer's stop, and its own kill switch.
struct Turn<'a> {
    stop: &'a AtomicBool,
    killed: &'a AtomicBool,
    ns: &'a str,
}

fn hold(
    mut q: Queue,
    turn: &Turn<'_>,
    min_ms: u64,
    max_ms: u64,
    mut seed: u64,
    stats: &Stats,
) -> std::io::Result<()> {
    let mut held: Vec<(Instant, Instant, nfq::Message)> = Vec::new();
    // Counted, or the error that ends the thread.
    let counted = |e: std::io::Error| match classify(&e) {
        QueueError::Empty => Ok(()),
        QueueError::LateVerdict => {
            stats.late_verdicts.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        QueueError::Overflow => {
            stats.overflows.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        QueueError::Fatal => Err(e),
    };
    let mut next = || {
        // xorshift64*: a test's own stream, no dependency.
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    while !turn.stop.load(Ordering::Relaxed) {
        // A crash, as the test hook asks: the queue socket closes with the thread, the kernel
        // drops what it held, and later packets pass undelayed (`--queue-bypass`).
        assert!(
            !turn.killed.load(Ordering::Relaxed),
            "the delayer of {} killed by its test hook",
            turn.ns
        );
        loop {
            match q.recv() {
                Ok(mut msg) => {
                    stats.received.fetch_add(1, Ordering::Relaxed);
                    msg.set_verdict(Verdict::Accept);
                    let d = min_ms + next() % (max_ms - min_ms + 1);
                    let now = Instant::now();
                    held.push((now, now + Duration::from_millis(d), msg));
                }
                Err(e) if classify(&e) == QueueError::Empty => break,
                Err(e) => counted(e)?,
            }
        }
        let now = Instant::now();
        let mut i = 0;
        while i < held.len() {
            if held[i].1 <= now {
                let (arrived, _, msg) = held.swap_remove(i);
                stats.record_hold(now.duration_since(arrived).as_millis() as u64);
                if let Err(e) = q.verdict(msg) {
                    counted(e)?;
                }
            } else {
                i += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for (_, _, msg) in held {
        let _ = q.verdict(msg);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The errors a fail-open queue reports in normal operation are counted, not fatal.
    #[test]
    fn late_verdicts_and_overflows_are_counted_and_anything_else_is_fatal() {
        let os = std::io::Error::from_raw_os_error;
        assert_eq!(classify(&os(nix::libc::ENOENT)), QueueError::LateVerdict);
        assert_eq!(classify(&os(nix::libc::ENOBUFS)), QueueError::Overflow);
        assert_eq!(classify(&os(nix::libc::EAGAIN)), QueueError::Empty);
        assert_eq!(classify(&os(nix::libc::EBADF)), QueueError::Fatal);
    }

    /// A delaying thread that dies while the delay is in force makes `health` fail, naming its
    /// namespace; one that recorded an error says which.
    #[test]
    fn a_delayer_whose_thread_stopped_is_unhealthy() {
        let stats = Arc::new(Stats::default());
        let d = Delayer {
            stop: Arc::new(AtomicBool::new(false)),
            threads: vec![("ns-a".into(), std::thread::spawn(|| {}))],
            stats: stats.clone(),
            kill: KillSwitch::default(),
        };
        std::thread::sleep(Duration::from_millis(50));
        let err = d.health().unwrap_err();
        assert!(err.contains("ns-a"), "{err}");
        *stats.failed.lock().unwrap() = Some("the delayer of ns-b: netfilter queue: EBADF".into());
        assert!(d.health().unwrap_err().contains("ns-b"));
        let healthy = Delayer {
            stop: Arc::new(AtomicBool::new(false)),
            threads: vec![],
            stats: Arc::new(Stats::default()),
            kill: KillSwitch::default(),
        };
        assert_eq!(healthy.health(), Ok(()));
        assert!(healthy.summary().contains("0 packets held"));
    }

    #[test]
    fn hold_percentiles_come_from_the_per_millisecond_counts() {
        let s = Stats::default();
        assert_eq!(s.hold_percentile(50), 0);
        for ms in 1..=100 {
            s.record_hold(ms);
        }
        s.record_hold(5_000); // beyond the buckets: counted in the last
        assert_eq!(s.hold_percentile(50), 51);
        assert_eq!(s.hold_percentile(90), 91);
        assert_eq!(s.hold_percentile(100), (HOLD_BUCKETS - 1) as u64);
        assert_eq!(s.hold_ms_max.load(Ordering::Relaxed), 5_000);
    }
}
