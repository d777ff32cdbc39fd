"""10GBASE-R between boards: our own PCS and MAC (IEEE 802.3 clauses 49 and 4/46), the
clock-domain crossing to the node, and the framing of MCF packets (``mcf.spec.eth``).

    node ── framer ── width ── TX FIFO ═╗                     ╔═ gearbox ── GT TX
      (sync domain)                    ╚═ MAC TX ── PCS TX ══╝   (eth_tx domain)
    node ── deframer ── width ── RX FIFO ═╗                   ╔═ gearbox ── GT RX
                                          ╚═ MAC RX ── PCS RX ╝   (eth_rx domain)

Design notes: docs/eth.md.
"""
