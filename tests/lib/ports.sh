# Sourced by the test and benchmark scripts: `free_port_block N` prints a port p such that
# p..p+N-1 are free on 127.0.0.1 right now, checked by binding each, and below the
# kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768- by default): a port that
# only a client's outgoing connection holds refuses a connect, so a connect-probe takes it
# for free, yet the broker's bind fails (EADDRINUSE), which once cost a CI run test 0001.
# tests/common/mod.rs's free_port_range does the same for the Rust tests.
free_port_block() {
  python3 - "${1:-1}" <<'PY'
import random, socket, sys
count = int(sys.argv[1])
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
top = min(32000, low) - count
for _ in range(500):
    p = random.randrange(12000, top)
    held = []
    try:
        for i in range(count):
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", p + i))
    except OSError:
        continue
    finally:
        for s in held:
            s.close()
    print(p)
    raise SystemExit(0)
raise SystemExit("no free block of %d ports" % count)
PY
}
