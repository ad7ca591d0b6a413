use super::*;

/// Preemptions per execution the models explore: 3 (bounded so that the loom run stays under two
/// minutes on two cores; the bugs of a two-index ring show with one or two).
const PREEMPTIONS: usize = 3;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(PREEMPTIONS);
    b.check(f);
}

/// A ring of 2 carries 3 tokens: the producer meets a full ring, the consumer an empty one; every
/// token arrives exactly once and in order.
#[test]
fn loom_single_tokens_arrive_once_in_order() {
    model(|| {
        let (mut p, mut c) = channel(2).unwrap();
        let producer = loom::thread::spawn(move || {
            for t in 1..=3 {
                p.push_blocking(t);
            }
        });
        let mut got = Vec::new();
        while got.len() < 3 {
            match c.pop() {
                Some(t) => got.push(t),
                None => spin_hint(),
            }
        }
        producer.join().unwrap();
        assert_eq!(got, [1, 2, 3]);
        assert_eq!(c.pop(), None);
    });
}

/// Batches on both sides: what `push_batch` accepts is what `pop_batch` returns, in order.
#[test]
fn loom_batches_arrive_once_in_order() {
    model(|| {
        let (mut p, mut c) = channel(2).unwrap();
        let producer = loom::thread::spawn(move || {
            let tokens = [1, 2, 3];
            let mut sent = 0;
            while sent < tokens.len() {
                let n = p.push_batch(&tokens[sent..]);
                if n == 0 {
                    spin_hint();
                }
                sent += n;
            }
        });
        let mut got = Vec::new();
        let mut out = [0; 2];
        while got.len() < 3 {
            let n = c.pop_batch(&mut out);
            assert!(n <= 2, "more than the capacity");
            if n == 0 {
                spin_hint();
            }
            got.extend_from_slice(&out[..n]);
        }
        producer.join().unwrap();
        assert_eq!(got, [1, 2, 3]);
    });
}
