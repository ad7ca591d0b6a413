use super::*;

#[test]
fn placeholder_compiles() {
    let nba = Nba::new(NbaConfig::new(Rate::gbps(1), 2)).unwrap();
    assert_eq!(nba.rates(), &[Rate::mbps(500), Rate::mbps(500)]);
}
