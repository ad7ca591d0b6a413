//! The configuration text tests start from: the interfaces `in0` (inside) and `out0` (outside)
//! and one class of TCP by destination port. The daemon's engine tests and the testbed's
//! real-traffic tests write their class's keys and any further tables after it, so each states
//! only what it sets.

/// `[interfaces]` (inside `in0`, outside `out0`) and one `[[class]]` named `name` that matches TCP
/// to `dst_port` (a port, `"5201"`, or a range, `"5201-5216"`), then `rest`: the class's own keys
/// first, then any further tables (TOML tables may come in any order).
pub fn tcp_class(name: &str, dst_port: &str, rest: &str) -> String {
    format!(
        "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n\n[[class]]\nname = \"{name}\"\n\
         match = {{ protocol = \"tcp\", dst_port = \"{dst_port}\" }}\n{rest}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn one_class_and_a_further_table() {
        let text = tcp_class(
            "bulk",
            "5201-5216",
            "rate = \"100mbit\"\n\n[daemon]\ncores = 2",
        );
        let config = Config::from_toml_str(&text, "fixture.toml").unwrap();
        assert_eq!(config.interfaces.inside, "in0");
        assert_eq!(config.interfaces.outside, "out0");
        assert_eq!(config.classes.len(), 1);
        assert_eq!(config.classes[0].name, "bulk");
        assert_eq!(
            config.classes[0].policy.rate.map(|r| r.bps()),
            Some(100_000_000)
        );
        assert_eq!(config.daemon.cores, 2);
    }
}
