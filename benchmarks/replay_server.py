"""Many fake vLLM servers in ONE process: real /metrics captures served on a range of ports.

    python benchmarks/replay_server.py --port 20000 --count 1000 --capture FILE [--capture FILE ...]

Port base+i serves capture i % len(captures) at /metrics (the same body on every request, so a
window of samples reads a steady server), 200 at /health and {"version": ...} at /version. One
asyncio loop serves every port (HTTP/1.0, one request per connection, as the modules send
them). Prints "ready" when every port listens. Loopback only. Standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import signal
import sys


def answer(status, body, ctype="text/plain; version=0.0.4"):
    head = "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (
        status, ctype, len(body))
    return head.encode() + body


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--port", type=int, required=True, help="first port")
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--capture", action="append", required=True)
    ap.add_argument("--version", default="0.32.0", help="what /version says (the captures' release)")
    ap.add_argument("--skip", default="", help="comma-separated port offsets left closed (dead servers)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.count * 2 + 256)), hard))
    bodies = []
    for path in args.capture:
        with open(path, "rb") as f:
            body = f.read()
        bodies.append((answer("200 OK", body), answer(
            "200 OK", b'{"version": "%s"}' % args.version.encode(), "application/json")))
    health = answer("200 OK", b"")
    missing = answer("404 Not Found", b"")
    skip = {int(x) for x in args.skip.split(",") if x}

    def handler(metrics, version):
        async def serve(reader, writer):
            try:
                line = await reader.readline()
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                path = line.split(b" ")[1] if line.count(b" ") >= 2 else b"/"
                writer.write(metrics if path == b"/metrics" else health if path == b"/health"
                             else version if path == b"/version" else missing)
                await writer.drain()
            except (ConnectionError, IndexError):
                pass
            finally:
                writer.close()
        return serve

    servers = []
    for i in range(args.count):
        if i in skip:
            continue
        metrics, version = bodies[i % len(bodies)]
        servers.append(await asyncio.start_server(handler(metrics, version), "127.0.0.1",
                                                  args.port + i, backlog=64))
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for srv in servers:
        srv.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
