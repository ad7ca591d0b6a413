# Web-search flow-size distribution (DCTCP, Alizadeh et al., SIGCOMM 2010, Figure 4's "query"
# and "background" traffic of a production search cluster), in the form pFabric (SIGCOMM 2013)
# and MQ-ECN (NSDI 2016, Figure 5, §5.1-5.2) use it. This is MQ-ECN's own file,
# github.com/HKUST-SING/MQ-ECN-NS2 workload/CDF_dctcp.txt, checked line by line on 2026-11-22.
#
# Format: one point per line, "<flow size in packets> <cumulative probability>", sizes in
# packets of 1460 bytes of payload (one MSS of a 1500-byte MTU), probabilities non-decreasing,
# the last one 1. '#' starts a comment. Sampling (metronome_sim::switch::FlowSizeCdf) draws
# u in [0, 1) and interpolates linearly between the two points around it (inverse CDF); the
# first two points make a point mass of 15 % at 6 packets.
6 0
6 0.15
13 0.2
19 0.3
33 0.4
53 0.53
133 0.6
667 0.7
1333 0.8
3333 0.9
6667 0.97
20000 1
