//! Certified links and catch-up (`core/src/certificate.rs`, `core/src/catchup.rs`; rule 7 of
//! `membership.rs`), each rule with a test that fails when the rule is loosened (issue 52,
//! classes 1 and 2). Each was seen to fail, for the rule's own reason, on the weakening its doc
//! comment names (applied by hand to the source, then reverted).
//!
//! Every link here is well signed unless the row says otherwise: each shape differs from an
//! accepted twin in the one thing its rule checks, so no other check can refuse in its place.
//! Only the public API is used; the simulator's names sign with
//! [`simulated_signature`], which [`verify`] accepts for names that are no peer ids.

use std::sync::Arc;

use chorus_core::certificate::{simulated_signature, verify};
use chorus_core::{Command, Core, Electorate, Event, Link, Message, NodeId, Notice, Refusal};

use crate::one_core;
use one_core::{from, sent_to};

fn ids(names: &[&str]) -> Vec<NodeId> {
    names.iter().map(|n| NodeId::from(*n)).collect()
}

/// A founding electorate of `members`.
fn genesis(members: &[&str]) -> Electorate {
    Electorate::new(1, ids(members))
}

/// `electorate` with the signatures of `signers` (repeats kept) over `signed`'s statement,
/// sorted by id as the admin keeps them.
fn signed_over(electorate: &Electorate, signed: &Electorate, signers: &[&str]) -> Link {
    let statement = signed.statement();
    let mut signers: Vec<_> = ids(signers)
        .into_iter()
        .map(|s| {
            let sig = simulated_signature(&s, &statement);
            (s, sig)
        })
        .collect();
    signers.sort();
    Link {
        electorate: Arc::new(electorate.clone()),
        signers,
    }
}

/// `electorate` with the signatures of `signers` over its own statement.
fn signed(electorate: &Electorate, signers: &[&str]) -> Link {
    signed_over(electorate, electorate, signers)
}

/// The verdict of `link.check(prev, verify)`, for the table's messages.
fn verdict(link: &Link, prev: &Electorate) -> Result<(), Refusal> {
    link.check(prev, verify)
}

// ---- Class 1: what a link must be ---------------------------------------------------------------

/// The next version, exactly: a link of version prev + 2 (or later), signed by a majority of
/// `prev` over its own statement, is refused, and so is one of prev's own version or an
/// earlier one; prev + 1 under the same signatures is taken. (A later version would let a node
/// skip the electorates between, whose majorities never endorsed it.)
///
/// Fails on `e.version != prev.version + 1` → `e.version <= prev.version` (any later one).
#[test]
fn a_link_is_exactly_the_next_version_of_its_predecessor() {
    let v1 = genesis(&["a", "b", "c"]);
    let v2 = v1.successor(2, ids(&["a", "b", "c", "d"]));
    let v3 = v2.successor(3, ids(&["a", "b", "c"]));
    let v6 = v3
        .successor(4, ids(&["a", "b", "c", "d"]))
        .successor(5, ids(&["a", "b", "c"]))
        .successor(6, ids(&["a", "b", "c", "d"]));
    assert_eq!((v2.version, v3.version, v6.version), (2, 3, 6));
    // A sibling of v2: version 2 again, proposed in another term.
    let sibling_of_prev = v1.successor(7, ids(&["a", "b"]));
    let rows: [(&str, &Electorate, &Electorate, Result<(), Refusal>); 6] = [
        ("prev + 1", &v1, &v2, Ok(())),
        ("prev + 2", &v1, &v3, Err(Refusal::BadCertificate)),
        ("prev + 5", &v1, &v6, Err(Refusal::BadCertificate)),
        ("prev + 1 after v2", &v2, &v3, Ok(())),
        (
            "prev's own version",
            &v2,
            &sibling_of_prev,
            Err(Refusal::BadCertificate),
        ),
        ("an earlier version", &v3, &v2, Err(Refusal::BadCertificate)),
    ];
    for (name, prev, next, want) in rows {
        // Every member of prev signs: only the version can refuse it.
        let members: Vec<&str> = prev.members().iter().map(NodeId::as_str).collect();
        let link = signed(next, &members);
        assert_eq!(
            verdict(&link, prev),
            want,
            "{name}: v{} after v{}",
            next.version,
            prev.version
        );
    }
}

/// The same cluster: a link of version 2 whose genesis is another cluster's, signed by every
/// member of the predecessor over its own statement, is refused; its twin with the
/// predecessor's genesis is taken. (Members of two clusters sign for each; a link of one must
/// not move a node of the other.)
///
/// Fails on `|| e.genesis != prev.genesis` dropped.
#[test]
fn a_link_keeps_its_predecessors_genesis() {
    let v1 = genesis(&["a", "b", "c"]);
    let next = ids(&["a", "b", "c", "d"]);
    let ours = v1.successor(2, next.clone());
    // Another cluster founded by a, b, c and x: a version 2 with the same members and term.
    let theirs = genesis(&["a", "b", "c", "x"]).successor(2, next);
    assert_eq!((theirs.version, theirs.term), (ours.version, ours.term));
    assert_ne!(theirs.genesis, v1.genesis);
    for signers in [&["a", "b"][..], &["a", "b", "c"]] {
        assert_eq!(verdict(&signed(&ours, signers), &v1), Ok(()), "{signers:?}");
        assert_eq!(
            verdict(&signed(&theirs, signers), &v1),
            Err(Refusal::BadCertificate),
            "another genesis, signed by {signers:?}"
        );
    }
}

/// Distinct signers: a repeated signer counts once, also where the repeats sit side by side
/// (the list sorted, as an admin keeps it) — one member of {a, b, c} twice, or once and a
/// second member, is not a majority of three; one of five three times, or two of five with one
/// repeated, not a majority of five. The same count of distinct members is taken.
///
/// Fails on the distinctness check loosened to sortedness alone: `w[0].0 < w[1].0` → `<=`.
#[test]
fn a_signer_repeated_side_by_side_counts_once() {
    let abc = genesis(&["a", "b", "c"]);
    let abcde = genesis(&["a", "b", "c", "d", "e"]);
    let rows: [(&Electorate, &[&str], Result<(), Refusal>); 8] = [
        (&abc, &["a", "a"], Err(Refusal::BadCertificate)),
        (&abc, &["b", "b", "b"], Err(Refusal::BadCertificate)),
        (&abc, &["a", "b"], Ok(())),
        (&abcde, &["c", "c", "c"], Err(Refusal::BadCertificate)),
        (&abcde, &["a", "a", "e"], Err(Refusal::BadCertificate)),
        (&abcde, &["a", "e", "e"], Err(Refusal::BadCertificate)),
        (&abcde, &["a", "c", "e"], Ok(())),
        (&abcde, &["a", "b", "b", "c"], Err(Refusal::BadCertificate)),
    ];
    for (prev, signers, want) in rows {
        let next = prev.successor(2, ids(&["a", "b", "c", "d", "e", "f"]));
        let link = signed(&next, signers);
        // Sorted, so every repeat is adjacent to its twin.
        assert!(link.signers.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(
            verdict(&link, prev),
            want,
            "{signers:?} of {} members",
            prev.len()
        );
    }
}

/// A majority is more than half: of an even-sized predecessor, half the members (two of four,
/// three of six, one of two) certify nothing; one more does. Odd sizes for contrast.
///
/// Fails on `self.signers.len() < prev.quorum()` → `self.signers.len() * 2 < prev.len()`
/// (half taken for a majority).
#[test]
fn half_of_an_even_electorate_is_not_a_majority() {
    let members = ["a", "b", "c", "d", "e", "f"];
    for n in 1..=6 {
        let prev = genesis(&members[..n]);
        let next = prev.successor(2, ids(&["a", "z"]));
        for k in 1..=n {
            let link = signed(&next, &members[..k]);
            let want = if 2 * k > n {
                Ok(())
            } else {
                Err(Refusal::BadCertificate)
            };
            assert_eq!(verdict(&link, &prev), want, "{k} of {n} members");
            // The last k members, for good measure (the first and the last half differ).
            let link = signed(&next, &members[n - k..n]);
            assert_eq!(verdict(&link, &prev), want, "last {k} of {n} members");
        }
    }
}

/// The signed statement binds the proposing term: the same members, version and genesis
/// proposed in another term are another statement, so signatures over one do not certify the
/// other (the siblings of issue 32: two proposals of one version in different terms). The
/// statement binds genesis, version and members too.
///
/// Fails on `h.update(self.term.to_be_bytes())` dropped from [`Electorate::statement`].
#[test]
fn the_signed_statement_binds_the_proposing_term() {
    let v1 = genesis(&["a", "b", "c"]);
    let members = ids(&["a", "b", "c", "d"]);
    let in_term_2 = v1.successor(2, members.clone());
    let in_term_3 = v1.successor(3, members.clone());
    assert_eq!(in_term_2.members(), in_term_3.members());
    assert_ne!(in_term_2.statement(), in_term_3.statement(), "term");
    // Every field of the statement makes another one.
    let another_genesis = genesis(&["a", "b", "x"]).successor(2, members.clone());
    let another_version = in_term_2.successor(2, members.clone());
    let other_members = v1.successor(2, ids(&["a", "b", "c", "e"]));
    for (name, other) in [
        ("genesis", &another_genesis),
        ("version", &another_version),
        ("members", &other_members),
    ] {
        assert_ne!(in_term_2.statement(), other.statement(), "{name}");
    }
    // A majority's (even every member's) signatures over the term-2 proposal do not certify the
    // term-3 one, nor the reverse; each certifies its own.
    for signers in [&["a", "b"][..], &["a", "b", "c"]] {
        assert_eq!(verdict(&signed(&in_term_2, signers), &v1), Ok(()));
        assert_eq!(verdict(&signed(&in_term_3, signers), &v1), Ok(()));
        for (shown, endorsed) in [(&in_term_3, &in_term_2), (&in_term_2, &in_term_3)] {
            let link = signed_over(shown, endorsed, signers);
            assert_eq!(
                verdict(&link, &v1),
                Err(Refusal::BadCertificate),
                "signed in term {}, shown as term {}",
                endorsed.term,
                shown.term
            );
        }
    }
}

// ---- Class 2: catching up through a chain ---------------------------------------------------------

/// An eligible node `id` of `members` (version 1), started at t=0 and connected to them.
fn voter(id: &str, members: &[&str]) -> Core {
    one_core::voter(id, members)
}

/// A heartbeat of `term` from the admin of a version-`certified` electorate of the cluster
/// founded as `genesis`.
fn heartbeat(term: u64, certified: u64, genesis: u64) -> Message {
    Message::Heartbeat {
        term,
        beat: 1,
        membership_version: certified,
        membership_term: term,
        genesis,
        electorate: None,
        certified,
    }
}

fn refused(out: &[Command]) -> Vec<(String, Refusal)> {
    out.iter()
        .filter_map(|c| match c {
            Command::Notice(Notice::Refused { from, reason, .. }) => {
                Some((from.as_str().to_owned(), *reason))
            }
            _ => None,
        })
        .collect()
}

/// The links `c` hands to whoever asks for those after version 1.
fn links_served(c: &mut Core, t: u64) -> Vec<Arc<Link>> {
    let out = c.step_vec(t, from("z", Message::ChainRequest { after: 1 }));
    match sent_to(&out, "z").as_slice() {
        [] => Vec::new(),
        [Message::Chain { links }] => links.clone(),
        other => panic!("one chain expected, got {other:?}"),
    }
}

/// The cluster's history after {a, b, c} (version 1), as `c` missed it: d added (term 2), a
/// removed (term 3), e added (term 4), b removed (term 5) — each link signed by a majority of
/// the electorate before it.
fn history(v1: &Electorate) -> Vec<Arc<Link>> {
    let v2 = v1.successor(2, ids(&["a", "b", "c", "d"]));
    let v3 = v2.successor(3, ids(&["b", "c", "d"]));
    let v4 = v3.successor(4, ids(&["b", "c", "d", "e"]));
    let v5 = v4.successor(5, ids(&["c", "d", "e"]));
    vec![
        Arc::new(signed(&v2, &["a", "b"])),
        Arc::new(signed(&v3, &["a", "b", "d"])),
        Arc::new(signed(&v4, &["b", "d"])),
        Arc::new(signed(&v5, &["b", "d", "e"])),
    ]
}

/// A chain is taken up to its first bad link, wherever that link sits: the bad one is refused
/// (once) with everything after it, even links that check against the bad one (a liar's
/// continuation of its own forgery), and the node holds, stamps and hands on exactly the good
/// prefix. The bad link is at the start, in the middle, and last.
///
/// Fails on the loop in `on_chain` going on past a refused link (`break` → `continue`), and on
/// it checking each link against the one before it in the message rather than the anchor.
#[test]
fn a_chain_is_taken_up_to_its_first_bad_link_wherever_it_sits() {
    let probe = voter("c", &["a", "b", "c"]);
    let v1 = probe.electorate().unwrap().clone();
    let good = history(&v1);
    // In the middle first, then last and first.
    for bad_at in [1, 2, 3, 0] {
        let mut c = probe.clone();
        // w, a stranger announcing version 5, is asked for the links after c's anchor.
        let out = c.step_vec(10, from("w", heartbeat(6, 5, v1.genesis)));
        assert_eq!(sent_to(&out, "w"), [&Message::ChainRequest { after: 1 }]);
        // The bad link: the next version, with members of w's making, signed by w alone (no
        // member of its predecessor); then w's own continuation of it, well signed by a
        // majority of the forged electorate.
        let prev = if bad_at == 0 {
            v1.clone()
        } else {
            (*good[bad_at - 1].electorate).clone()
        };
        let forged = prev.successor(6, ids(&["c", "w", "x"]));
        let forged_next = forged.successor(6, ids(&["c", "w", "x", "y"]));
        let forged_last = forged_next.successor(6, ids(&["w", "x", "y"]));
        let mut links: Vec<Arc<Link>> = good[..bad_at].to_vec();
        links.push(Arc::new(signed(&forged, &["w"])));
        links.push(Arc::new(signed(&forged_next, &["w", "x"])));
        links.push(Arc::new(signed(&forged_last, &["w", "x", "y"])));
        let out = c.step_vec(11, from("w", Message::Chain { links }));
        assert_eq!(
            refused(&out),
            [("w".to_owned(), Refusal::BadCertificate)],
            "bad link at {bad_at}: refused once, the rest with it"
        );
        assert_eq!(c.electorate(), Some(&prev), "bad link at {bad_at}");
        let stamp = if bad_at == 0 { 0 } else { prev.term };
        assert_eq!(c.stamp(), stamp, "bad link at {bad_at}");
        assert_eq!(
            links_served(&mut c, 12),
            good[..bad_at].to_vec(),
            "bad link at {bad_at}: c hands on the good prefix only"
        );
        // The whole good chain from a later question is still taken from where c got to.
        let out = c.step_vec(MIN, from("w", heartbeat(6, 5, v1.genesis)));
        let after = prev.version;
        assert_eq!(sent_to(&out, "w"), [&Message::ChainRequest { after }]);
        let rest = good[bad_at..].to_vec();
        let out = c.step_vec(MIN + 1, from("w", Message::Chain { links: rest }));
        assert_eq!(refused(&out), [], "bad link at {bad_at}");
        assert_eq!(c.electorate(), Some(&*good[3].electorate));
        assert_eq!(c.stamp(), 5);
    }
}

const MIN: u64 = 30_000;

/// One stranger at a time: a node asks the first stranger that announces newer links; a second
/// stranger announcing them within a heartbeat interval is not asked, and its answer is refused
/// as unsolicited and changes nothing, while the first one's is taken. Once an interval has
/// passed with no answer, the slot goes to whoever announces next, and the first stranger's
/// late answer is the unsolicited one.
///
/// Fails on the stranger's pacing dropped in `ask_chain` (`!trusted && now < at + interval` →
/// `false`), on `<` → `<=` there, and on `on_chain` taking an answer from anyone while a
/// question is out.
#[test]
fn two_strangers_compete_for_the_one_stranger_slot() {
    let probe = voter("c", &["a", "b", "c"]);
    let v1 = probe.electorate().unwrap().clone();
    let interval = probe.config().heartbeat_interval_ms;
    let good = history(&v1);
    let announce = heartbeat(6, 5, v1.genesis);
    let asked = |out: &[Command], peer: &str| {
        sent_to(out, peer).contains(&&Message::ChainRequest { after: 1 })
    };
    let answer = Message::Chain {
        links: good.clone(),
    };

    // w1 announces first and is asked; w2 announces within the interval and is not.
    let mut c = probe.clone();
    assert!(asked(&c.step_vec(10, from("w1", announce.clone())), "w1"));
    let out = c.step_vec(11, from("w2", announce.clone()));
    assert!(!asked(&out, "w2"), "w2 asked at once: {out:?}");
    assert_eq!(refused(&out), [("w2".to_owned(), Refusal::NotMember)]);
    let mut first_answers = c.clone();
    // w2 answers unasked: refused, nothing taken.
    let out = c.step_vec(20, from("w2", answer.clone()));
    assert_eq!(refused(&out), [("w2".to_owned(), Refusal::Unsolicited)]);
    assert_eq!(c.electorate(), Some(&v1));
    // w1 answers: taken.
    let out = c.step_vec(21, from("w1", answer.clone()));
    assert_eq!(refused(&out), []);
    assert_eq!(c.electorate(), Some(&*good[3].electorate));
    // (The same answer from w1 first is taken too, and w2's after it is still unsolicited.)
    first_answers.step_vec(20, from("w1", answer.clone()));
    assert_eq!(first_answers.electorate(), Some(&*good[3].electorate));
    let out = first_answers.step_vec(21, from("w2", answer.clone()));
    assert_eq!(refused(&out), [("w2".to_owned(), Refusal::Unsolicited)]);

    // w1 never answers: an interval after it was asked, w2's announcement takes the slot, and
    // w1's late answer is refused.
    let mut c = probe.clone();
    assert!(asked(&c.step_vec(10, from("w1", announce.clone())), "w1"));
    let out = c.step_vec(10 + interval - 1, from("w2", announce.clone()));
    assert!(!asked(&out, "w2"), "w2 asked within the interval: {out:?}");
    let out = c.step_vec(10 + interval, from("w2", announce.clone()));
    assert!(asked(&out, "w2"), "w2 not asked once the interval passed");
    let out = c.step_vec(10 + interval + 1, from("w1", answer.clone()));
    assert_eq!(refused(&out), [("w1".to_owned(), Refusal::Unsolicited)]);
    assert_eq!(c.electorate(), Some(&v1));
    let out = c.step_vec(10 + interval + 2, from("w2", answer));
    assert_eq!(refused(&out), []);
    assert_eq!(c.electorate(), Some(&*good[3].electorate));
}

/// A stale node whose question goes unanswered for an interval, asked again by the same
/// announcer, asks it no more: it walks the peer table, one peer per interval and round the
/// table, until one answers (`chorus-sim fuzz` seed 243728: workers of the founding electorate
/// asked only the admin, which had joined after the first change and held no link from theirs).
///
/// Fails on `ask_chain` asking the announcer every time.
#[test]
fn an_unanswered_question_walks_the_peers_until_one_answers() {
    let mut c = voter("c", &["a", "b", "c"]);
    let v1 = c.electorate().unwrap().clone();
    let interval = c.config().heartbeat_interval_ms;
    let good = history(&v1);
    let announce = heartbeat(6, 5, v1.genesis);
    for p in ["d", "w1"] {
        c.step_vec(1, Event::peer_up(p.into(), one_core::voter_info()));
    }
    let asked = |out: &[Command]| -> Vec<String> {
        out.iter()
            .filter_map(|c| match c {
                Command::Send {
                    to,
                    msg: Message::ChainRequest { after: 1 },
                } => Some(to.as_str().to_owned()),
                _ => None,
            })
            .collect()
    };
    let mut t = 10;
    assert_eq!(asked(&c.step_vec(t, from("w1", announce.clone()))), ["w1"]);
    let out = c.step_vec(t + interval - 1, from("w1", announce.clone()));
    assert_eq!(
        asked(&out),
        Vec::<String>::new(),
        "asked within the interval"
    );
    let mut walked = Vec::new();
    for _ in 0..3 {
        t += interval;
        walked.extend(asked(&c.step_vec(t, from("w1", announce.clone()))));
    }
    assert_eq!(walked, ["a", "b", "d"], "the walk, in id order after w1");
    let out = c.step_vec(
        t + 1,
        from(
            "d",
            Message::Chain {
                links: good.clone(),
            },
        ),
    );
    assert_eq!(refused(&out), []);
    assert_eq!(c.electorate(), Some(&*good[3].electorate));
    // Answered: the next question goes to whoever announces again.
    let newer = heartbeat(7, 6, v1.genesis);
    assert_eq!(
        asked(&c.step_vec(t + 2, from("w1", newer))),
        Vec::<String>::new()
    );
}

/// A node that joined on version 2 (discovery handed it the electorate, not its link) asks its
/// admin once for the link of that electorate, keeps it because it is exactly its anchor, and
/// hands it to a node one version behind; a second heartbeat asks nothing more (`chorus-sim
/// fuzz` seed 454363: every node that held version 2's link retired, and the rest had joined
/// on version 2 without it).
///
/// Fails on a node that never asks for its anchor's link, or drops it as "not newer".
#[test]
fn a_node_that_joined_on_a_later_electorate_fetches_and_hands_on_its_link() {
    let v1 = Electorate::new(1, ids(&["a", "b", "c"]));
    let good = history(&v1);
    let v2 = (*good[0].electorate).clone();
    let mut c = Core::new("c".into(), chorus_core::Config::default(), vec![], 42).unwrap();
    c.set_electorate_for_test(v2.clone());
    c.step_vec(0, Event::Started);
    one_core::connect(&mut c, 0, &["a", "b", "c", "d"]);
    let asked =
        |out: &[Command], after: u64| sent_to(out, "a").contains(&&Message::ChainRequest { after });
    let beat = heartbeat(1, 2, v1.genesis);
    let out = c.step_vec(10, from("a", beat.clone()));
    assert!(asked(&out, 1), "the anchor's link not asked for: {out:?}");
    let out = c.step_vec(
        11,
        from(
            "a",
            Message::Chain {
                links: good.clone(),
            },
        ),
    );
    assert_eq!(refused(&out), []);
    assert_eq!(
        c.electorate(),
        Some(&*good[3].electorate),
        "and the rest taken"
    );
    let out = c.step_vec(12, from("z", Message::ChainRequest { after: 1 }));
    let [Message::Chain { links }] = sent_to(&out, "z").as_slice() else {
        panic!("no chain from version 1 handed on: {out:?}");
    };
    assert_eq!(links.first().map(|l| l.electorate.version), Some(2));
    assert_eq!(links[0].check(&v1, verify), Ok(()));
    let out = c.step_vec(20, from("a", heartbeat(1, 5, v1.genesis)));
    assert!(!asked(&out, 1), "asked twice: {out:?}");
}

/// A node that is a member itself (not behind a stranger) asks its own admin at once, even
/// while a stranger holds the slot: the stranger's pacing never slows a follower.
#[test]
fn a_stranger_holding_the_slot_does_not_pace_the_admin() {
    let mut c = voter("c", &["a", "b", "c"]);
    let v1 = c.electorate().unwrap().clone();
    let asked = |out: &[Command], peer: &str| {
        sent_to(out, peer).contains(&&Message::ChainRequest { after: 1 })
    };
    assert!(asked(
        &c.step_vec(10, from("w", heartbeat(2, 5, v1.genesis))),
        "w"
    ));
    // a, a member, is elected in term 2 and its heartbeat names version 5: c asks it too.
    let vote = Message::VoteRequest {
        term: 2,
        electorate_version: 1,
        electorate_term: 0,
        electorate_hash: v1.fingerprint(),
        electorate_stamp: 0,
        transfer: false,
    };
    c.step_vec(11, from("a", vote));
    let out = c.step_vec(12, from("a", heartbeat(2, 5, v1.genesis)));
    assert!(asked(&out, "a"), "{out:?}");
}

/// A node keeps the newest 1,024 links to hand on (`MAX_LINKS_KEPT`), and answers only with
/// links that start right after the version asked: after catching up over 1,025 changes it
/// serves from version 3 (the newest 1,024: 3..=1026) to a node at 2, and nothing to a node at
/// 1 (version 2 was dropped: a chain with a gap would not check) or at 0 (no link 1 exists).
///
/// Fails on `Chain::keep` keeping one fewer (`links.len() > MAX_LINKS_KEPT` → `==` or `>=`:
/// version 3 dropped too) and on `Chain::links_after` answering whatever it holds after the
/// version asked (its guard `version == after + 1` → `true`). Found by cargo-mutants.
#[test]
fn the_newest_1024_links_are_kept_and_served_only_without_a_gap() {
    let mut c = voter("c", &["a", "b", "c"]);
    let v1 = c.electorate().unwrap().clone();
    let mut links = Vec::new();
    let mut prev = v1.clone();
    for k in 2..=1026u64 {
        let members: &[&str] = if k % 2 == 0 {
            &["a", "b", "c", "d"]
        } else {
            &["a", "b", "c"]
        };
        let next = prev.successor(k, ids(members));
        links.push(Arc::new(signed(&next, &["a", "b", "c"])));
        prev = next;
    }
    // d announces version 1026 and answers c's questions, 64 links at a time.
    let mut t = 0;
    let mut after = 1;
    while after < 1026 {
        t += 60_000;
        let out = c.step_vec(t, from("d", heartbeat(5_000, 1026, v1.genesis)));
        assert_eq!(
            sent_to(&out, "d"),
            [&Message::ChainRequest { after }],
            "at {after}"
        );
        let chunk: Vec<_> = links[(after - 1) as usize..]
            .iter()
            .take(64)
            .cloned()
            .collect();
        let out = c.step_vec(t + 1, from("d", Message::Chain { links: chunk }));
        assert_eq!(refused(&out), [], "at {after}");
        after = (after + 64).min(1026);
    }
    let served = |c: &mut Core, t: u64, after: u64| {
        let out = c.step_vec(t, from("z", Message::ChainRequest { after }));
        match sent_to(&out, "z").as_slice() {
            [] => Vec::new(),
            [Message::Chain { links }] => links.iter().map(|l| l.electorate.version).collect(),
            other => panic!("one chain expected, got {other:?}"),
        }
    };
    assert_eq!(served(&mut c, t + 2, 2), (3..=66).collect::<Vec<u64>>());
    assert_eq!(served(&mut c, t + 3, 1), Vec::<u64>::new());
    assert_eq!(served(&mut c, t + 4, 0), Vec::<u64>::new());
    assert_eq!(
        served(&mut c, t + 5, 1000),
        (1001..=1026).collect::<Vec<u64>>()
    );
}

// ---- Endorsements: who is sent a late one -------------------------------------------------------

/// A late endorsement (the signature arriving after the heartbeat was acknowledged) goes, with a
/// second acknowledgement of that beat, only to an admin the node follows in the term it holds
/// the electorate in: a real term (above 0) and its stamp. A heartbeat claiming term 0 (no
/// election ever ran: no admin) makes its sender known but not followed in a term, and a
/// heartbeat of term 2 naming another electorate than the one held (stamp 0) is no
/// confirmation; neither is sent the signature. Term 1 over the electorate held, for contrast,
/// is.
///
/// Fails on `following`'s conjunctions in `on_signed` loosened (either `&&` → `||`: the term-0
/// sender is sent it), on `self.term > 0` → `>=`, and on the admin filter's `following && *a !=
/// self.id` → `||` (both the term-0 and the term-2 sender are sent it). Found by cargo-mutants.
#[test]
fn a_late_endorsement_goes_only_to_an_admin_followed_in_a_real_term() {
    let probe = voter("c", &["a", "b", "c"]);
    let v1 = probe.electorate().unwrap().clone();
    let statement = v1.statement();
    let signature = simulated_signature(&"c".into(), &statement);
    let signed = Event::Signed {
        digest: statement,
        signature: signature.clone(),
    };
    let beat = |term: u64, version: u64| Message::Heartbeat {
        term,
        beat: 1,
        membership_version: version,
        membership_term: 0,
        genesis: v1.genesis,
        electorate: None,
        certified: 1,
    };
    // (heartbeat, whether c then sends its endorsement)
    let cases = [(beat(0, 1), false), (beat(1, 1), true), (beat(2, 2), false)];
    for (hb, sends) in cases {
        let mut c = probe.clone();
        let out = c.step_vec(10, from("a", hb.clone()));
        assert_eq!(refused(&out), [], "{hb:?}");
        assert_eq!(c.admin().map(NodeId::as_str), Some("a"), "{hb:?}");
        let out = c.step_vec(11, signed.clone());
        let expected = Message::HeartbeatAck {
            term: c.term(),
            beat: 1,
            promise_ms: 0,
            holds: true,
            endorsement: Some(signature.clone()),
            certified: 1,
        };
        let sent = sent_to(&out, "a");
        if sends {
            assert_eq!(sent, [&expected], "{hb:?}");
        } else {
            assert_eq!(sent, Vec::<&Message>::new(), "{hb:?}: term {}", c.term());
        }
    }
}

/// A chain answer moves the node's position only when it certified something new: after an
/// operator's forced recovery (the anchor is then the forced electorate, proposed in a new
/// term the node has not confirmed it in: its stamp is still 0), an answer to a question asked
/// before it that brings nothing newer leaves the stamp where it was, and so does one whose
/// first link is refused.
///
/// Fails on `self.certified() > before` → `>=` in `on_chain` (the anchor taken as a later
/// position, stamped with its term, on an answer that certified nothing). Found by
/// cargo-mutants.
#[test]
fn a_chain_answer_that_certifies_nothing_moves_no_position() {
    let probe = voter("c", &["a", "b", "c"]);
    let v1 = probe.electorate().unwrap().clone();
    let bad = Arc::new(signed(&v1.successor(6, ids(&["c", "w"])), &["w"]));
    for links in [Vec::new(), vec![bad]] {
        let mut c = probe.clone();
        // w, a stranger announcing version 5, is asked; then the operator forces {c}.
        let out = c.step_vec(10, from("w", heartbeat(6, 5, v1.genesis)));
        assert_eq!(sent_to(&out, "w"), [&Message::ChainRequest { after: 1 }]);
        c.step_vec(11, Event::ForceNewElectorate);
        let forced = c.electorate().unwrap().clone();
        assert_eq!((forced.version, forced.term), (2, 1));
        assert_eq!(c.stamp(), 0);
        c.step_vec(12, from("w", Message::Chain { links }));
        assert_eq!(c.electorate(), Some(&forced));
        assert_eq!(c.stamp(), 0, "stamped with the forced electorate's term");
    }
}
