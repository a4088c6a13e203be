#!/usr/bin/env python3
"""A TCP proxy that adds latency, for the remote-source latency bench: every
chunk of bytes a client sends (an HTTP request) reaches the server DELAY ms
later, in order; answers flow back at once. So each request takes DELAY ms
more, as over a link with that round trip, while any number of requests
and connections are in flight. One asyncio loop on one thread: it costs a
few microseconds per chunk, so the servers, not the proxy, set the pace
(the fault proxy, fault_proxy.py, parses HTTP on a thread per connection
and is meant for injecting errors).

  delay_proxy.py --upstream 127.0.0.1:PORT --delay-ms MS

Prints "listening on 127.0.0.1:PORT" once it accepts connections.
"""
import argparse
import asyncio
import socket
import sys
import time


async def pump_delayed(reader, writer, delay):
    """Forwards reader -> writer, each chunk `delay` seconds after it came."""
    queue = asyncio.Queue()

    async def read():
        while True:
            data = await reader.read(65536)
            await queue.put((time.monotonic() + delay, data))
            if not data:
                return

    async def write():
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    await asyncio.gather(read(), write())


async def pump(reader, writer):
    while True:
        data = await reader.read(262144)
        if not data:
            if writer.can_write_eof():
                writer.write_eof()
            return
        writer.write(data)
        await writer.drain()


def nodelay(writer):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--delay-ms", type=float, default=20)
    args = ap.parse_args()
    host, port = args.upstream.rsplit(":", 1)
    delay = args.delay_ms / 1000.0

    async def handle(creader, cwriter):
        try:
            ureader, uwriter = await asyncio.open_connection(host, int(port))
        except OSError:
            cwriter.close()
            return
        nodelay(cwriter)
        nodelay(uwriter)
        try:
            await asyncio.gather(pump_delayed(creader, uwriter, delay),
                                 pump(ureader, cwriter))
        except (ConnectionError, OSError):
            pass
        finally:
            for w in (cwriter, uwriter):
                try:
                    w.close()
                except OSError:
                    pass

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    print("listening on 127.0.0.1:%d" % server.sockets[0].getsockname()[1],
          flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
