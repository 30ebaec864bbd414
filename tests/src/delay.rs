//! Delay and reordering of real packets without `netem` (this kernel has none): every packet a
//! node's namespace sends to the cluster is queued to user space (iptables `NFQUEUE`), held for
//! a random 50–150 ms (say), and let go — so packets overtake each other as on a real network.
//! One thread per namespace, entered with `setns`; the queue fails open (a packet nobody holds
//! goes on), and dropping the [`Delayer`] lets every held packet go.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nfq::{Queue, Verdict};

/// Delaying threads, one per namespace; stopped and joined on drop.
pub struct Delayer {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Delayer {
    /// Holds every packet queued to queue 0 in each namespace of `namespaces` for a uniformly
    /// random `min_ms..=max_ms`. Returns once every thread listens.
    pub fn start(namespaces: &[String], min_ms: u64, max_ms: u64) -> Delayer {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        for (k, ns) in namespaces.iter().enumerate() {
            let (ns, stop, ready) = (ns.clone(), stop.clone(), ready_tx.clone());
            threads.push(std::thread::spawn(move || {
                let queue = open_in(&ns);
                ready.send(()).expect("ready");
                hold(
                    queue,
                    &stop,
                    min_ms,
                    max_ms,
                    0x9E37_79B9_7F4A_7C15 ^ k as u64,
                );
            }));
        }
        for _ in namespaces {
            ready_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("a delaying thread failed to start (see its panic)");
        }
        Delayer { stop, threads }
    }
}

impl Drop for Delayer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Enters namespace `ns` (this thread only) and binds its queue 0.
fn open_in(ns: &str) -> Queue {
    let file = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("namespace file");
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
    let mut q = Queue::open().expect("netfilter queue socket");
    q.bind(0).expect("bind queue 0");
    // Only the verdict matters: no payload copied, and a full queue lets packets through.
    q.set_copy_range(0, 0).expect("copy range");
    q.set_fail_open(0, true).expect("fail open");
    q.set_queue_max_len(0, 4096).expect("queue length");
    q.set_nonblocking(true);
    q
}

fn hold(mut q: Queue, stop: &AtomicBool, min_ms: u64, max_ms: u64, mut seed: u64) {
    let mut held: Vec<(Instant, nfq::Message)> = Vec::new();
    let mut next = || {
        // xorshift64*: a test's own stream, no dependency.
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    while !stop.load(Ordering::Relaxed) {
        loop {
            match q.recv() {
                Ok(mut msg) => {
                    msg.set_verdict(Verdict::Accept);
                    let d = min_ms + next() % (max_ms - min_ms + 1);
                    held.push((Instant::now() + Duration::from_millis(d), msg));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("netfilter queue: {e}"),
            }
        }
        let now = Instant::now();
        let mut i = 0;
        while i < held.len() {
            if held[i].0 <= now {
                let (_, msg) = held.swap_remove(i);
                let _ = q.verdict(msg);
            } else {
                i += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for (_, msg) in held {
        let _ = q.verdict(msg);
    }
}
