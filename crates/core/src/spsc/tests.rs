use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;

#[test]
fn refuses_bad_capacities() {
    assert_eq!(channel(0).err(), Some(SpscError::Capacity));
    assert_eq!(channel(6).err(), Some(SpscError::Capacity));
    assert!(channel(1).is_ok());
}

#[test]
fn full_and_empty_are_exact() {
    let (mut p, mut c) = channel(4).unwrap();
    assert_eq!(c.pop(), None);
    assert!(c.is_empty());
    for t in 0..4 {
        p.push(t).unwrap();
    }
    assert_eq!(p.push(9), Err(9), "the fifth token is handed back");
    assert_eq!(p.refused(), 1);
    assert_eq!(c.len(), 4);
    assert_eq!(c.pop(), Some(0));
    p.push(4).unwrap();
    let mut out = [0; 8];
    assert_eq!(c.pop_batch(&mut out), 4);
    assert_eq!(&out[..4], &[1, 2, 3, 4]);
    assert_eq!(c.pop_batch(&mut out), 0);
}

#[test]
fn batches_take_what_fits_and_hand_back_the_rest() {
    let (mut p, mut c) = channel(8).unwrap();
    assert_eq!(p.push_batch(&[1, 2, 3, 4, 5]), 5);
    assert_eq!(p.push_batch(&[6, 7, 8, 9, 10]), 3);
    assert_eq!(p.refused(), 2);
    let mut out = [0; 3];
    assert_eq!(c.pop_batch(&mut out), 3);
    assert_eq!(out, [1, 2, 3]);
    assert_eq!(
        p.push_batch(&[9, 10]),
        2,
        "wraps around the end of the slots"
    );
    let mut rest = [0; 16];
    assert_eq!(c.pop_batch(&mut rest), 7);
    assert_eq!(&rest[..7], &[4, 5, 6, 7, 8, 9, 10]);
}

#[derive(Clone, Debug)]
enum Op {
    Push(u64),
    PushBatch(Vec<u64>),
    Pop,
    PopBatch(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u64>().prop_map(Op::Push),
        prop::collection::vec(any::<u64>(), 0..12).prop_map(Op::PushBatch),
        Just(Op::Pop),
        (0usize..12).prop_map(Op::PopBatch),
    ]
}

proptest! {
    /// Any sequence of operations behaves like a bounded VecDeque.
    #[test]
    fn matches_a_bounded_vecdeque(cap_log in 0u32..4, ops in prop::collection::vec(op(), 0..200)) {
        let cap = 1usize << cap_log;
        let (mut p, mut c) = channel(cap).unwrap();
        let mut model = VecDeque::new();
        let mut refused = 0u64;
        for op in ops {
            match op {
                Op::Push(t) => {
                    let r = p.push(t);
                    if model.len() < cap { prop_assert_eq!(r, Ok(())); model.push_back(t); }
                    else { prop_assert_eq!(r, Err(t)); refused += 1; }
                }
                Op::PushBatch(ts) => {
                    let n = p.push_batch(&ts);
                    let fit = ts.len().min(cap - model.len());
                    prop_assert_eq!(n, fit);
                    model.extend(&ts[..fit]);
                    refused += (ts.len() - fit) as u64;
                }
                Op::Pop => prop_assert_eq!(c.pop(), model.pop_front()),
                Op::PopBatch(k) => {
                    let mut out = vec![0; k];
                    let n = c.pop_batch(&mut out);
                    prop_assert_eq!(n, k.min(model.len()));
                    for o in &out[..n] { prop_assert_eq!(Some(*o), model.pop_front()); }
                }
            }
            prop_assert_eq!(c.len(), model.len());
            prop_assert_eq!(p.refused(), refused);
        }
    }
}

/// Two threads, a small ring, many tokens: all arrive once, in order. A fixed token count, not
/// timed.
#[test]
fn threads_hand_over_every_token_once_in_order() {
    const TOKENS: u64 = 100_000;
    let (mut p, mut c) = channel(64).unwrap();
    let producer = std::thread::spawn(move || {
        let mut next = 0;
        while next < TOKENS {
            let batch: Vec<u64> = (next..(next + 7).min(TOKENS)).collect();
            next += p.push_batch(&batch) as u64;
        }
    });
    let mut expect = 0;
    let mut out = [0; 5];
    while expect < TOKENS {
        let n = c.pop_batch(&mut out);
        for t in &out[..n] {
            assert_eq!(*t, expect);
            expect += 1;
        }
    }
    producer.join().unwrap();
    assert_eq!(c.pop(), None);
}
