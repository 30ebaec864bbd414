//! Hostile peers: authenticated workers that lie. Each hostile node runs an honest core (so it
//! connects, answers WHOAMI and follows like any worker) and, beside it, a [`Liar`] that sends
//! well-formed but arbitrary messages to random nodes: random and extreme terms, forged
//! heartbeats and step-downs for live terms, unsolicited votes, acks and WHOAMI replies with
//! made-up electorates, and old messages it heard, replayed as its own. It announces newer
//! certified electorates than anyone holds, and answers the nodes that ask it for the links with
//! forged ones: made-up electorates signed by itself, with made-up signatures for members, or
//! genuine links it heard with a member swapped in (`chorus_core::certificate`).
//!
//! It also speaks for tasks it never ran (issue 52), once a burst, aimed where each lie could
//! do harm ([`Liar::answer`]): a forged result sent to the task's origin, or to the admin to
//! relay, naming any node as the worker (marked [`FORGED_STDOUT_PREFIX`], so a result that
//! was taken shows); and forged acknowledgements — to a worker, so it would forget a result its
//! submitter never had, and to the admin naming a worker, for it to pass on. Every one is
//! refused (`unsolicited` or `not_owner`): only the worker the admin placed a task on, or the
//! admin relaying for it, speaks for a result, and only the origin or the admin acknowledges
//! one (`chorus_core::task`). The tasks it aims at are those it heard of, those numbered
//! around the latest it heard of each origin (likely in flight elsewhere), and made-up ones;
//! never one placed on itself (its honest core runs those, and its word counts).
//!
//! What a liar cannot do, because the transport authenticates: send as anyone but itself; nor,
//! because members sign with keys it does not hold, sign for another node. What
//! it does not do: claim `admin_election` (it advertises a worker's capabilities), or collude
//! with other liars on one made-up electorate — a node adopts an electorate only when
//! `confirmations` peers report the same one, so that many colluding liars could mislead a node
//! that has none yet (the agreed electorate of the membership issue closes that).
//!
//! The checker judges the honest nodes only.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use chorus_core::certificate::{simulated_signature, verify};
use chorus_core::rng::below;
use chorus_core::{
    Electorate, Link, Message, NodeId, Resources, Signature, TaskId, TaskResult, TaskStatus,
    MAX_WIRE_INT,
};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How many heard messages a liar keeps for replaying.
const HEARD: usize = 32;

/// The start of the stdout of every result a liar forges: a submitter that took one shows it.
pub const FORGED_STDOUT_PREFIX: &str = "forged by ";

/// Task numbers a liar makes up ids with (`nJ-1` to `nJ-MADE_UP_SEQS`): a run's first tasks.
const MADE_UP_SEQS: u64 = 64;

/// Task numbers a liar aims at around the latest it heard of an origin (half before it).
const NEAR_SEQS: u64 = 12;

/// The lying half of a hostile node.
pub struct Liar {
    rng: ChaCha8Rng,
    heard: VecDeque<Message>,
    /// The highest term and beat heard, so forgeries can aim at live terms.
    term: u64,
    beat: u64,
    /// The newest genesis heard, so forged links aim at the cluster.
    genesis: u64,
    /// Nodes that asked it for links, with the version they asked after.
    askers: VecDeque<(usize, u64)>,
    /// Task lies (issue 52), on a stream of their own: the other lies stay as they were.
    tasks: TaskLies,
    /// Link lies (issue 52), on a stream of their own too.
    links: LinkLies,
    /// Lies of this burst still to send, in order (a heartbeat, then the chain it provokes a
    /// question for; a reshaped answer, then the forged one).
    queued: VecDeque<(usize, Message)>,
}

/// The shapes a liar reshapes genuine links into (issue 52), each refused by one rule of
/// [`Link::check`] alone: every other check passes, the signatures are members' own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkShape {
    /// One signer twice, side by side after sorting, making up a majority's count (the rest
    /// distinct members, each signature good).
    RepeatedSigner,
    /// Half the members of an even-sized predecessor (two of four), each signature good.
    HalfOfEven,
    /// The electorate under another proposing term, with the genuine signatures: the same
    /// members under another term are another statement.
    OtherTerm,
    /// The electorate of another genesis, with the genuine signatures.
    OtherGenesis,
    /// A genuine link two versions ahead of the electorate it is handed to, signed by a
    /// majority of that electorate (so only the version rule refuses it).
    SkippedVersion,
}

/// Every [`LinkShape`].
pub const LINK_SHAPES: [LinkShape; 5] = [
    LinkShape::RepeatedSigner,
    LinkShape::HalfOfEven,
    LinkShape::OtherTerm,
    LinkShape::OtherGenesis,
    LinkShape::SkippedVersion,
];

/// Which reshaping `link` is, judged against `genuine`, the certified links by version (for
/// tests: a liar's answer tells nothing of its shape). A genuine link handed on is a skipped
/// version only where the receiver's anchor makes it one: [`LinkShape::SkippedVersion`] here
/// means "genuine", for the caller to judge by what the receiver did.
pub fn link_shape(link: &Link, genuine: &BTreeMap<u64, Arc<Link>>) -> Option<LinkShape> {
    let g = genuine.get(&link.electorate.version)?;
    let (e, ge) = (&link.electorate, &g.electorate);
    let same_members = e.members() == ge.members() && e.version == ge.version;
    if *link == **g {
        return Some(LinkShape::SkippedVersion);
    }
    if !same_members {
        return None;
    }
    if e.term != ge.term && e.genesis == ge.genesis && link.signers == g.signers {
        return Some(LinkShape::OtherTerm);
    }
    if e.genesis != ge.genesis && e.term == ge.term && link.signers == g.signers {
        return Some(LinkShape::OtherGenesis);
    }
    if e != ge {
        return None;
    }
    if link.signers.windows(2).any(|w| w[0].0 == w[1].0) {
        return Some(LinkShape::RepeatedSigner);
    }
    let prev = genuine.get(&(e.version - 1)).map(|l| l.electorate.len());
    let subset = link.signers.iter().all(|s| g.signers.contains(s));
    let half = |n: usize| n.is_multiple_of(2) && link.signers.len() * 2 == n;
    (subset && prev.is_none_or(half)).then_some(LinkShape::HalfOfEven)
}

/// What a liar knows for its link lies.
struct LinkLies {
    rng: ChaCha8Rng,
    /// The certified links it heard, checked, by version (the most signers kept).
    links: BTreeMap<u64, Arc<Link>>,
    /// The electorates those links certify, and the one before the first of them.
    electorates: BTreeMap<u64, Arc<Electorate>>,
    /// Electorates heard of (discovery replies), to check a first link against.
    heard: VecDeque<Arc<Electorate>>,
    /// Bursts since it learned its newest link: while that is fresh, nodes are still catching
    /// up to it, and its lies go to every node.
    fresh: u32,
    /// This burst's link lies are out.
    lied: bool,
}

/// What a liar knows for its task lies.
struct TaskLies {
    rng: ChaCha8Rng,
    /// Tasks it heard of (besides placements on itself), newest last.
    heard: VecDeque<TaskId>,
    /// Tasks placed on its own core: its results for these are true ones, never forged.
    placed_here: BTreeSet<TaskId>,
    /// The highest task number it heard of per origin (from placements on itself too): the
    /// tasks just around it are likely in flight, placed elsewhere.
    latest: BTreeMap<NodeId, u64>,
    /// The node whose heartbeat it heard last: the admin, to send relays to.
    admin: Option<usize>,
    /// This burst's task lie is out: [`Liar::answer`] ends the burst's answers.
    lied: bool,
}

impl Liar {
    /// The liar of node `index`, seeded apart from everything else of the run.
    pub fn new(seed: u64, index: usize) -> Liar {
        let stream = seed ^ 0x4057_11e5_0000_0000 ^ (index as u64).wrapping_mul(0x9e37_79b9);
        Liar {
            rng: ChaCha8Rng::seed_from_u64(stream),
            heard: VecDeque::with_capacity(HEARD),
            term: 0,
            beat: 0,
            genesis: 0,
            askers: VecDeque::new(),
            tasks: TaskLies {
                rng: ChaCha8Rng::seed_from_u64(stream ^ 0x7a5c_0000_0000_0052),
                heard: VecDeque::with_capacity(HEARD),
                placed_here: BTreeSet::new(),
                latest: BTreeMap::new(),
                admin: None,
                lied: false,
            },
            links: LinkLies {
                rng: ChaCha8Rng::seed_from_u64(stream ^ 0x11a4_0000_0000_0052),
                links: BTreeMap::new(),
                electorates: BTreeMap::new(),
                heard: VecDeque::new(),
                fresh: 0,
                lied: false,
            },
            queued: VecDeque::new(),
        }
    }

    /// Takes note of a message delivered to the hostile node by node `from`.
    pub fn hear(&mut self, from: usize, msg: &Message) {
        self.tasks.hear(from, msg);
        self.links.hear(msg);
        match msg {
            Message::ChainRequest { after } if self.askers.len() < HEARD => {
                self.askers.push_back((from, *after));
            }
            Message::Heartbeat { genesis, .. } if *genesis != 0 => self.genesis = *genesis,
            _ => {}
        }
        let (term, beat) = match msg {
            Message::Heartbeat { term, beat, .. } | Message::HeartbeatAck { term, beat, .. } => {
                (*term, *beat)
            }
            Message::WhoamiReply { term, beat, .. } => (*term, *beat),
            Message::PreVoteRequest { term, .. }
            | Message::VoteRequest { term, .. }
            | Message::PreVoteReply { term, .. }
            | Message::VoteReply { term, .. }
            | Message::StepDown { term, .. } => (*term, 0),
            _ => (0, 0),
        };
        // Only plausible values: a liar that believed another liar would aim at nothing.
        if term <= MAX_WIRE_INT {
            self.term = self.term.max(term);
        }
        if beat <= MAX_WIRE_INT {
            self.beat = self.beat.max(beat);
        }
        if self.heard.len() == HEARD {
            self.heard.pop_front();
        }
        self.heard.push_back(msg.clone());
    }

    /// A random index in `0..n`.
    pub fn pick(&mut self, n: usize) -> usize {
        below(&mut self.rng, n.max(1) as u64) as usize
    }

    fn flip(&mut self) -> bool {
        below(&mut self.rng, 2) == 1
    }

    /// A term a liar might claim: the live one, just above it, far above it, or extreme.
    fn term(&mut self) -> u64 {
        match below(&mut self.rng, 8) {
            0 => self.term,
            1 => self.term.saturating_add(1),
            2 => self.term.saturating_add(1 + below(&mut self.rng, 1_000)),
            3 => 0,
            4 => MAX_WIRE_INT,
            5 => MAX_WIRE_INT + 1,
            6 => u64::MAX,
            _ => self.rng.next_u64(),
        }
    }

    /// A beat or version: near the live one, or extreme.
    fn big(&mut self) -> u64 {
        match below(&mut self.rng, 5) {
            0 => self.beat,
            1 => self.beat.saturating_add(1 + below(&mut self.rng, 100)),
            2 => MAX_WIRE_INT,
            3 => u64::MAX,
            _ => self.rng.next_u64(),
        }
    }

    /// A made-up electorate that always contains the liar.
    fn electorate(&mut self, me: &NodeId, nodes: usize) -> Arc<Electorate> {
        let mut members = vec![me.clone()];
        for _ in 0..below(&mut self.rng, 4) {
            members.push(NodeId::from(format!("n{}", self.pick(nodes))));
        }
        let version = match below(&mut self.rng, 4) {
            0 => 1,
            1 => 2,
            2 => MAX_WIRE_INT,
            _ => 1 + below(&mut self.rng, 1_000),
        };
        Arc::new(Electorate::new(version, members))
    }

    /// The next answer of this burst, `None` at its end: to each node that asked this liar for
    /// links, a reshaped genuine link ([`LinkShape`]) when it holds one to reshape, then a
    /// forged one; then, once a burst, the link lies ([`LinkLies::lies`]: a question for the
    /// newest links, and a heartbeat announcing newer ones followed at once by a reshaped link,
    /// so that the node it provokes into asking has the lie in hand before the honest core's
    /// answer); then a task lie aimed at whom it could fool ([`Liar::task_lie`]).
    pub fn answer(&mut self, me: &NodeId, nodes: usize) -> Option<(usize, Message)> {
        let next = self.next_answer(me, nodes);
        if next.is_none() {
            self.links.lied = false;
        }
        next
    }

    fn next_answer(&mut self, me: &NodeId, nodes: usize) -> Option<(usize, Message)> {
        if let Some(next) = self.queued.pop_front() {
            return Some(next);
        }
        let Some((to, after)) = self.askers.pop_front() else {
            if !std::mem::replace(&mut self.links.lied, true) {
                let (term, beat) = (self.term, self.beat);
                let lies = self
                    .links
                    .lies(me, nodes, (self.genesis, term, beat), self.tasks.admin);
                self.queued.extend(lies);
                if let Some(next) = self.queued.pop_front() {
                    return Some(next);
                }
            }
            if std::mem::take(&mut self.tasks.lied) {
                return None;
            }
            self.tasks.lied = true;
            return self.task_lie(me, nodes);
        };
        let forged = self.forged_links(me, nodes, after);
        match self.links.reshaped(after) {
            Some(link) => {
                self.queued.push_back((to, forged));
                let links = vec![link];
                Some((to, Message::Chain { links }))
            }
            None => Some((to, forged)),
        }
    }

    /// A forged answer to a node that asked for the links after `after`: made-up electorates
    /// signed by the liar, or a genuine link heard with a member swapped in.
    fn forged_links(&mut self, me: &NodeId, nodes: usize, after: u64) -> Message {
        let mut links = Vec::new();
        let heard = self.heard.iter().find_map(|m| match m {
            Message::Chain { links } => links.first().cloned(),
            _ => None,
        });
        match (below(&mut self.rng, 3), heard) {
            // A genuine link with a member swapped for the liar: the signatures no longer fit.
            (0, Some(link)) => {
                let mut members = link.electorate.members().to_vec();
                members[0] = me.clone();
                let prev_version = link.electorate.version - 1;
                let e = Electorate::new(prev_version, vec![me.clone()]);
                let mut forged = e.successor(link.electorate.term, members);
                forged.genesis = link.electorate.genesis;
                links.push(Arc::new(Link {
                    electorate: Arc::new(forged),
                    signers: link.signers.clone(),
                }));
            }
            // A made-up next electorate, signed by the liar and with made-up signatures for
            // members of every kind.
            _ => {
                let mut members = vec![me.clone()];
                members.extend((0..3).map(|_| NodeId::from(format!("n{}", self.pick(nodes)))));
                let before = Electorate::new(after.max(1), members.clone());
                let mut e = before.successor(self.term, members);
                e.genesis = self.genesis; // aimed at the cluster it heard
                let e = Arc::new(e);
                let statement = e.statement();
                let mut signers: Vec<(NodeId, Signature)> = (0..nodes)
                    .map(|j| {
                        let id = NodeId::from(format!("n{j}"));
                        let sig = if id == *me {
                            simulated_signature(me, &statement)
                        } else {
                            Signature::from_bytes(&self.rng.next_u64().to_be_bytes())
                        };
                        (id, sig)
                    })
                    .collect();
                signers.sort();
                links.push(Arc::new(Link {
                    electorate: e,
                    signers,
                }));
            }
        }
        Message::Chain { links }
    }

    /// A lie about a task `me` never ran, and the node it is aimed at: a forged result to the
    /// task's origin or to the admin (to relay), naming any node as its worker; a forged
    /// acknowledgement to any node (a worker that may hold the result), or to the admin naming
    /// a worker (to pass on). `None` when the lie would be aimed at `me`.
    pub fn task_lie(&mut self, me: &NodeId, nodes: usize) -> Option<(usize, Message)> {
        let t = &mut self.tasks;
        let n = nodes.max(2) as u64;
        let index = |id: &NodeId| {
            id.as_str()
                .strip_prefix('n')
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|i| *i < nodes)
        };
        let mine = index(me).unwrap_or(nodes) as u64;
        // Any node but this one.
        let other = |rng: &mut ChaCha8Rng| {
            let j = below(rng, n - 1);
            (if j >= mine { j + 1 } else { j }) as usize
        };
        let heard = t.heard.len() as u64;
        let task = match below(&mut t.rng, 4) {
            0 if heard > 0 => t.heard[below(&mut t.rng, heard) as usize].clone(),
            // Next to the latest task of an origin it heard of: likely in flight elsewhere.
            0..=2 if !t.latest.is_empty() => {
                let i = below(&mut t.rng, t.latest.len() as u64) as usize;
                let (origin, latest) = t.latest.iter().nth(i).expect("within the map");
                let seq = (latest + below(&mut t.rng, NEAR_SEQS)).saturating_sub(NEAR_SEQS / 2);
                TaskId {
                    origin: origin.clone(),
                    seq: seq.max(1),
                }
            }
            _ => TaskId {
                origin: NodeId::from(format!("n{}", other(&mut t.rng))),
                seq: 1 + below(&mut t.rng, MADE_UP_SEQS),
            },
        };
        if t.placed_here.contains(&task) {
            return None;
        }
        let origin = index(&task.origin)?;
        let anyone = NodeId::from(format!("n{}", below(&mut t.rng, n)));
        let somewhere = other(&mut t.rng);
        let admin = t.admin.unwrap_or(somewhere);
        let (to, msg) = match below(&mut t.rng, 4) {
            0 | 1 => {
                let result = TaskResult {
                    status: TaskStatus::Succeeded,
                    exit_code: Some(0),
                    signal: None,
                    worker: anyone,
                    attempt: 1 + below(&mut t.rng, 3) as u32,
                    duration_ms: 1,
                    usage: Default::default(),
                    stdout: format!("{FORGED_STDOUT_PREFIX}{me}"),
                    stderr: String::new(),
                    stdout_truncated_bytes: 0,
                    stderr_truncated_bytes: 0,
                    error: None,
                    timings: Default::default(),
                };
                let to = if below(&mut t.rng, 2) == 0 {
                    origin
                } else {
                    admin
                };
                let result = Box::new(result);
                (to, Message::TaskResult { task, result })
            }
            2 => (somewhere, Message::TaskResultAck { task, worker: None }),
            _ => {
                let worker = Some(anyone);
                (admin, Message::TaskResultAck { task, worker })
            }
        };
        (format!("n{to}") != me.as_str()).then_some((to, msg))
    }

    /// The next lie of node `me` in a cluster of `nodes`.
    pub fn lie(&mut self, me: &NodeId, nodes: usize) -> Message {
        match below(&mut self.rng, 11) {
            0 => Message::Heartbeat {
                term: self.term(),
                beat: self.big(),
                membership_version: below(&mut self.rng, 4),
                genesis: self.genesis,
                electorate: None,
                membership_term: 0,
                // Newer links than anyone holds: every node that refuses it asks the liar.
                certified: 1 + below(&mut self.rng, 64),
            },
            1 => Message::HeartbeatAck {
                term: self.term(),
                beat: self.big(),
                promise_ms: 30_000,
                holds: false,
                endorsement: None,
                certified: 0,
            },
            2 => Message::VoteReply {
                term: self.term(),
                granted: true,
                promise_ms: 30_000,
            },
            3 => Message::PreVoteReply {
                term: self.term(),
                granted: self.flip(),
            },
            4 => Message::VoteRequest {
                term: self.term(),
                electorate_version: below(&mut self.rng, 3),
                electorate_hash: self.rng.next_u64(),
                electorate_term: 0,
                electorate_stamp: 0,
                transfer: false,
            },
            5 => Message::PreVoteRequest {
                term: self.term(),
                electorate_version: below(&mut self.rng, 3),
                electorate_hash: self.rng.next_u64(),
                electorate_term: 0,
                electorate_stamp: 0,
            },
            6 => Message::StepDown {
                term: self.term(),
                successor: None,
            },
            7 | 8 => {
                let admin = if self.flip() {
                    me.clone()
                } else {
                    NodeId::from(format!("n{}", self.pick(nodes)))
                };
                let uptime_s = if self.flip() {
                    u64::MAX
                } else {
                    below(&mut self.rng, 1 << 40)
                };
                Message::WhoamiReply {
                    admin: Some(admin),
                    term: self.term(),
                    membership_version: self.big(),
                    beat: self.big(),
                    eligible: true,
                    uptime_s,
                    resources: Resources {
                        cpu_millicores: u32::MAX,
                        mem_free_mb: u32::MAX,
                        ..Default::default()
                    },
                    electorate: Some(self.electorate(me, nodes)),
                    genesis: self.big(),
                    electorate_stamp: 0,
                }
            }
            9 => Message::Whoami {
                electorate_version: self.big(),
                electorate_term: 0,
                electorate_stamp: 0,
            },
            _ => match self.heard.len() {
                0 => Message::StepDown {
                    term: self.term,
                    successor: None,
                },
                n => {
                    let i = self.pick(n);
                    self.heard[i].clone()
                }
            },
        }
    }
}

/// For this many bursts after it learned a new link, a liar sends its link lies to every node.
const FRESH_BURSTS: u32 = 4;

/// The most links a liar keeps.
const LINKS_KEPT: usize = 64;

/// Node `id`'s index, if it is one of the `nodes` (`nJ`).
fn index_of(id: &NodeId, nodes: usize) -> Option<usize> {
    id.as_str()
        .strip_prefix('n')
        .and_then(|i| i.parse::<usize>().ok())
        .filter(|i| *i < nodes)
}

impl LinkLies {
    fn hear(&mut self, msg: &Message) {
        match msg {
            // Discovery replies carry electorates: the one a chain starts from is among them.
            Message::WhoamiReply {
                electorate: Some(e),
                ..
            } if !self.electorates.contains_key(&e.version) => {
                if self.heard.len() == HEARD {
                    self.heard.pop_front();
                }
                self.heard.push_back(e.clone());
            }
            Message::Chain { links } => {
                for link in links.iter().take(LINKS_KEPT) {
                    self.keep(link);
                }
            }
            _ => {}
        }
    }

    /// Keeps `link` if it checks against the electorate before it (a kept link's, or one heard
    /// of that version and genesis) and has more signers than the one kept of its version.
    fn keep(&mut self, link: &Arc<Link>) {
        let e = &link.electorate;
        let v = e.version;
        if !(2..=MAX_WIRE_INT).contains(&v)
            || self
                .links
                .get(&v)
                .is_some_and(|k| k.signers.len() >= link.signers.len())
        {
            return;
        }
        let checks = |prev: &Electorate| link.check(prev, verify).is_ok();
        let prev = match self.electorates.get(&(v - 1)) {
            Some(prev) => checks(prev).then(|| prev.clone()),
            None => self
                .heard
                .iter()
                .find(|c| c.version == v - 1 && c.genesis == e.genesis && checks(c))
                .cloned(),
        };
        let Some(prev) = prev else { return };
        self.electorates.insert(v - 1, prev);
        self.electorates.insert(v, e.clone());
        if self.newest().is_none_or(|n| v > n) {
            self.fresh = 0;
        }
        self.links.insert(v, link.clone());
        while self.links.len() > LINKS_KEPT {
            self.links.pop_first();
        }
        while self.electorates.len() > LINKS_KEPT + 1 {
            self.electorates.pop_first();
        }
    }

    /// The newest version it holds a link of.
    fn newest(&self) -> Option<u64> {
        self.links.last_key_value().map(|(v, _)| *v)
    }

    /// A reshaped link for a node whose anchor is version `after`: a random shape, or the
    /// next that can be made from the links kept; `None` when none can.
    fn reshaped(&mut self, after: u64) -> Option<Arc<Link>> {
        let first = below(&mut self.rng, LINK_SHAPES.len() as u64) as usize;
        (0..LINK_SHAPES.len())
            .find_map(|i| self.shape(LINK_SHAPES[(first + i) % LINK_SHAPES.len()], after))
    }

    /// `shape` made from the genuine links kept, for a node anchored at version `p`: refused
    /// there by the shape's rule alone.
    fn shape(&mut self, shape: LinkShape, p: u64) -> Option<Arc<Link>> {
        let prev = self.electorates.get(&p)?.clone();
        if shape == LinkShape::SkippedVersion {
            let link = self.links.get(&p.checked_add(2)?)?;
            let members = link.signers.iter().all(|(id, _)| prev.contains(id));
            return (members && link.signers.len() >= prev.quorum()).then(|| link.clone());
        }
        let link = self.links.get(&p.checked_add(1)?)?.clone();
        let e = &link.electorate;
        let (electorate, signers) = match shape {
            LinkShape::RepeatedSigner => {
                // A majority's count, one of them twice: q - 1 distinct members.
                let q = prev.quorum();
                if q < 2 || link.signers.len() < q - 1 {
                    return None;
                }
                let mut signers = link.signers[..q - 1].to_vec();
                signers.insert(1, signers[0].clone());
                (e.clone(), signers)
            }
            LinkShape::HalfOfEven => {
                let n = prev.len();
                if n == 0 || n % 2 != 0 || link.signers.len() < n / 2 {
                    return None;
                }
                (e.clone(), link.signers[..n / 2].to_vec())
            }
            LinkShape::OtherTerm => {
                let term = e.term + 1 + below(&mut self.rng, 3);
                let members = e.members().to_vec();
                let mut other = Electorate::new(p, members.clone()).successor(term, members);
                other.genesis = e.genesis;
                (Arc::new(other), link.signers.clone())
            }
            LinkShape::OtherGenesis => {
                let mut other = Electorate::clone(e);
                other.genesis = e.genesis.wrapping_add(1 + below(&mut self.rng, 1_000));
                (Arc::new(other), link.signers.clone())
            }
            LinkShape::SkippedVersion => unreachable!("returned above"),
        };
        Some(Arc::new(Link {
            electorate,
            signers,
        }))
    }

    /// This burst's link lies, once it heard the cluster's genesis: a question for the links
    /// after the newest it holds, to the admin or anyone (answers reach it before its honest
    /// core, which asks only when a heartbeat names a newer version); then, to other nodes, a
    /// heartbeat of the live term announcing newer links than it holds — refused as
    /// `not_member`, it makes the node ask this liar — followed at once by a reshaped link for
    /// a node one version behind the newest (two, for a skipped version): in hand before the
    /// honest core's answer, and checked if the node is that far behind. To every node for a
    /// few bursts after it learned a new link (nodes are catching up to it), else to one.
    fn lies(
        &mut self,
        me: &NodeId,
        nodes: usize,
        (genesis, term, beat): (u64, u64, u64),
        admin: Option<usize>,
    ) -> Vec<(usize, Message)> {
        let mut out = Vec::new();
        if genesis == 0 || nodes < 2 {
            return out;
        }
        let mine = index_of(me, nodes).unwrap_or(nodes);
        let rng = &mut self.rng;
        let other = |rng: &mut ChaCha8Rng| {
            let j = below(rng, nodes as u64 - u64::from(mine < nodes)) as usize;
            if j >= mine {
                j + 1
            } else {
                j
            }
        };
        let asked = match admin.filter(|a| *a != mine) {
            Some(a) if below(rng, 2) == 0 => a,
            _ => other(rng),
        };
        let newest = self.newest();
        let after = newest.unwrap_or(1);
        out.push((asked, Message::ChainRequest { after }));
        let Some(newest) = newest else {
            return out;
        };
        self.fresh = self.fresh.saturating_add(1);
        let targets: Vec<usize> = if self.fresh <= FRESH_BURSTS {
            (0..nodes).filter(|j| *j != mine).collect()
        } else {
            vec![other(&mut self.rng)]
        };
        for to in targets {
            let first = below(&mut self.rng, LINK_SHAPES.len() as u64) as usize;
            let lie = (0..LINK_SHAPES.len()).find_map(|i| {
                let shape = LINK_SHAPES[(first + i) % LINK_SHAPES.len()];
                let behind = if shape == LinkShape::SkippedVersion {
                    2
                } else {
                    1
                };
                self.shape(shape, newest.checked_sub(behind)?)
            });
            let Some(lie) = lie else { break };
            out.extend(self.provoke(to, lie, newest, (genesis, term, beat)));
        }
        out
    }

    /// A heartbeat of the live term announcing newer links than `newest`, refused as
    /// `not_member` and so making `to` ask this liar, then `lie` right behind it.
    fn provoke(
        &mut self,
        to: usize,
        lie: Arc<Link>,
        newest: u64,
        (genesis, term, beat): (u64, u64, u64),
    ) -> [(usize, Message); 2] {
        let certified = newest + 1 + below(&mut self.rng, 8);
        let heartbeat = Message::Heartbeat {
            term,
            beat,
            membership_version: 0,
            genesis,
            electorate: None,
            membership_term: 0,
            certified,
        };
        [(to, heartbeat), (to, Message::Chain { links: vec![lie] })]
    }
}

impl TaskLies {
    fn hear(&mut self, from: usize, msg: &Message) {
        let task = match msg {
            Message::Heartbeat { .. } => {
                self.admin = Some(from);
                return;
            }
            Message::TaskPlace { task, .. } => {
                if self.placed_here.len() < 4 * HEARD * HEARD {
                    self.placed_here.insert(task.clone());
                }
                self.note(task);
                return;
            }
            Message::TaskCancel { task, .. }
            | Message::TaskResultAck { task, .. }
            | Message::TaskState { task, .. }
            | Message::TaskResult { task, .. }
            | Message::TaskCancelAsk { task }
            | Message::TaskCancelAsked { task } => task,
            _ => return,
        };
        self.note(task);
        if self.heard.len() == HEARD {
            self.heard.pop_front();
        }
        self.heard.push_back(task.clone());
    }

    fn note(&mut self, task: &TaskId) {
        if task.seq <= MAX_WIRE_INT
            && (self.latest.len() < HEARD || self.latest.contains_key(&task.origin))
        {
            let latest = self.latest.entry(task.origin.clone()).or_default();
            *latest = (*latest).max(task.seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The task lies (issue 52): forged results to origins and to the admin, forged
    /// acknowledgements to anyone and to the admin naming a worker; about tasks heard of and
    /// made up, never one placed on the liar itself, never aimed at itself; once a burst, on
    /// a stream of their own.
    #[test]
    fn task_lies_forge_results_and_acknowledgements_of_others_tasks() {
        let me = NodeId::from("n6");
        let mine = TaskId {
            origin: "n1".into(),
            seq: 7,
        };
        let theirs = TaskId {
            origin: "n2".into(),
            seq: 3,
        };
        let run = |seed| {
            let mut l = Liar::new(seed, 6);
            l.hear(0, &heartbeat());
            let place = Message::TaskPlace {
                term: 4,
                task: mine.clone(),
                attempt: 1,
                seq: 1,
                spec: Default::default(),
            };
            l.hear(0, &place);
            let state = Message::TaskCancelAsk {
                task: theirs.clone(),
            };
            l.hear(3, &state);
            (0..400)
                .filter_map(|_| l.task_lie(&me, 7))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        let lies = run(1);
        assert!(lies.len() > 300, "{}", lies.len());
        let (mut to_origin, mut to_admin, mut acks, mut relayed_acks, mut heard) = (0, 0, 0, 0, 0);
        for (to, lie) in &lies {
            assert_ne!(*to, 6, "aimed at itself: {lie:?}");
            match lie {
                Message::TaskResult { task, result } => {
                    assert_ne!(*task, mine);
                    assert!(result.stdout.starts_with(FORGED_STDOUT_PREFIX));
                    assert!(result.check().is_ok(), "well-formed: {result:?}");
                    heard += usize::from(*task == theirs);
                    if format!("n{to}") == task.origin.as_str() {
                        to_origin += 1;
                    }
                    if *to == 0 {
                        to_admin += 1;
                    }
                }
                Message::TaskResultAck { task, worker } => {
                    assert_ne!(*task, mine);
                    match worker {
                        None => acks += 1,
                        Some(_) => {
                            assert_eq!(*to, 0, "to the admin");
                            relayed_acks += 1;
                        }
                    }
                }
                other => panic!("not a task lie: {other:?}"),
            }
        }
        assert!(
            [to_origin, to_admin, acks, relayed_acks, heard]
                .iter()
                .all(|n| *n > 10),
            "{to_origin} {to_admin} {acks} {relayed_acks} {heard}"
        );
        // Once a burst, after the links asked for: `answer` gives one, then ends the burst.
        let mut l = Liar::new(3, 6);
        let burst = |l: &mut Liar| std::iter::from_fn(|| l.answer(&me, 7)).count();
        let sizes: Vec<usize> = (0..50).map(|_| burst(&mut l)).collect();
        assert!(sizes.iter().all(|n| *n <= 1), "{sizes:?}");
        assert!(sizes.iter().filter(|n| **n == 1).count() > 40, "{sizes:?}");
    }

    fn heartbeat() -> Message {
        Message::Heartbeat {
            term: 4,
            beat: 40,
            membership_version: 1,
            genesis: 0,
            electorate: None,
            membership_term: 0,
            certified: 0,
        }
    }

    #[test]
    fn lies_are_deterministic_per_seed_and_varied() {
        let me = NodeId::from("n9");
        let run = |seed| {
            let mut l = Liar::new(seed, 9);
            l.hear(
                0,
                &Message::Heartbeat {
                    term: 4,
                    beat: 40,
                    membership_version: 1,
                    genesis: 0,
                    electorate: None,
                    membership_term: 0,
                    certified: 0,
                },
            );
            (0..200).map(|_| l.lie(&me, 10)).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        let lies = run(1);
        let kinds: std::collections::BTreeSet<_> = lies.iter().map(Message::kind).collect();
        assert!(kinds.len() >= 9, "{kinds:?}");
        assert!(lies.iter().any(|m| m.check_bounds().is_err()), "extremes");
        assert!(lies
            .iter()
            .any(|m| matches!(m, Message::Heartbeat { term: 4 | 5, .. })));
    }
}
