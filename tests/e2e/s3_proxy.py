"""A small HTTP/1.1 reverse proxy between an S3 client and an S3 server, for
tests and benchmarks: it counts requests and injects faults. Standard library
only.

As a module:

    p = S3Proxy(upstream_port, latency_ms=0)  # upstream on 127.0.0.1
    p.start()                                 # background thread; returns once listening
    p.port                                    # where clients connect
    p.counts      # {"GET": n, "HEAD": n, "PUT": n, "LIST": n, ...other methods}
    p.requests    # [(method, path_with_query, range_or_None, status_or_None), ...]
    p.reset_counts()
    p.set_fault("status", code=503, only="GET", times=2)
    p.clear_fault()
    p.stop()

Faults (one at a time; `only` is None for every request, or a category from
`counts` such as "GET" for object GETs that are not listings; `times=N` limits
the fault to the next N matching requests):
    latency  ms=N      wait N ms more before forwarding
    reset              close the client connection with a RST on the request
    stall              read the request, never answer
    status   code=N    answer N with an S3 XML error, upstream not contacted
                       (Code InternalError for 500, SlowDown for 503, or
                       error_code="ServiceUnavailable" say)
    cut      bytes=N   relay the headers and N bytes of the body, then close
    refuse             close the listening socket and every connection
                       (only and times do not apply); clearing it, or
                       setting another fault, listens again on the same port
The `latency_ms` given at construction (or set on the attribute) applies to
every request whatever the fault. `requests` has the status the client got,
None when it got none (reset, stall, or a connection that broke first).
Request bodies are read whole before they are forwarded; a client's
`Expect: 100-continue` is answered by the proxy itself.

As a script:

    python3 s3_proxy.py --upstream 127.0.0.1:PORT --listen 127.0.0.1:0 --latency-ms 20

prints `listening on 127.0.0.1:NNNN`, then serves until killed.

The Host header is forwarded unchanged: the client signed the proxy's
host:port, and S3 servers check the signature against the Host they receive.
"""

import argparse
import asyncio
import socket
import struct
import sys
import threading
import urllib.parse

LIMIT = 1 << 20  # longest header block or chunk-size line
ERRORS = {
    400: ("BadRequest", "Bad Request"),
    403: ("AccessDenied", "Access Denied"),
    404: ("NoSuchKey", "The specified key does not exist."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
    501: ("NotImplemented", "A header you provided implies functionality that is not implemented."),
    502: ("BadGateway", "The proxy could not reach the upstream server."),
    503: ("SlowDown", "Please reduce your request rate."),
}
REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
           500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway",
           503: "Service Unavailable"}
FAULTS = ("latency", "reset", "stall", "status", "cut", "refuse")


def category(method, target):
    """"LIST" for a listing (the service root, or a bucket root with no query or
    a list-type, prefix or delimiter parameter), else the method."""
    if method != "GET":
        return method
    path, _, query = target.partition("?")
    if path == "/":
        return "LIST"
    keys = {k for k, _ in urllib.parse.parse_qsl(query, keep_blank_values=True)}
    if path.strip("/").count("/") == 0 and (not query or keys & {"list-type", "prefix", "delimiter"}):
        return "LIST"
    return "GET"


def header(headers, name):
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


async def read_head(reader):
    """A header block as (first line, [(name, value)]), or None at a clean EOF."""
    try:
        data = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise
    lines = data.decode("latin-1").split("\r\n")[:-2]
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    return lines[0], headers


def encode_head(first, headers):
    return ("%s\r\n%s\r\n" % (first, "".join("%s: %s\r\n" % h for h in headers))).encode("latin-1")


class Closed(Exception):
    """The client connection is to be closed after this request."""


class S3Proxy:
    def __init__(self, upstream_port, latency_ms=0, upstream_host="127.0.0.1",
                 listen_host="127.0.0.1", port=0, verbose=False):
        self.upstream = (upstream_host, upstream_port)
        self.listen_host = listen_host
        self.port = port
        self.latency_ms = latency_ms
        self.verbose = verbose
        self._lock = threading.Lock()
        self._fault = None  # dict: kind, only, times, params
        self._counts = {}
        self._requests = []
        self._conns = {}  # client writer -> its task
        self._loop = None
        self._server = None
        self._thread = None
        self.reset_counts()

    # --- the test thread's side ---------------------------------------------

    def start(self):
        started = threading.Event()
        failure = []

        def run():
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self._listen())
            except Exception as e:
                failure.append(e)
                self._loop.close()
                started.set()
                return
            started.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name="s3-proxy", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self):
        if self._thread is None:
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._thread = None

    @property
    def counts(self):
        with self._lock:
            return dict(self._counts)

    @property
    def requests(self):
        with self._lock:
            return [tuple(r) for r in self._requests]

    def reset_counts(self):
        with self._lock:
            self._counts = {"GET": 0, "HEAD": 0, "PUT": 0, "LIST": 0}
            self._requests = []

    def set_fault(self, kind, only=None, times=None, **params):
        if kind not in FAULTS:
            raise ValueError("unknown fault %r (one of %s)" % (kind, ", ".join(FAULTS)))
        with self._lock:
            was = self._fault
            self._fault = {"kind": kind, "only": only, "times": times, "params": params}
        if kind == "refuse":
            self._call(self._unlisten())
        elif was is not None and was["kind"] == "refuse":
            self._call(self._listen())

    def clear_fault(self):
        with self._lock:
            was, self._fault = self._fault, None
        if was is not None and was["kind"] == "refuse":
            self._call(self._listen())

    def _call(self, coro):
        if self._loop is None or self._thread is None:
            coro.close()
            return
        asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _log(self, *args):
        if self.verbose:
            print("s3_proxy:", *args, file=sys.stderr, flush=True)

    # --- the event loop's side ---------------------------------------------

    async def _listen(self):
        if self._server is None:
            self._server = await asyncio.start_server(
                self._client, self.listen_host, self.port, limit=LIMIT)
            self.port = self._server.sockets[0].getsockname()[1]

    async def _unlisten(self):
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer, task in list(self._conns.items()):
            writer.transport.abort()
            task.cancel()

    async def _shutdown(self):
        tasks = list(self._conns.values())
        await self._unlisten()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _take_fault(self, cat):
        """The fault that applies to a request of this category, used up if counted."""
        with self._lock:
            f = self._fault
            if f is None or f["kind"] == "refuse" or f["only"] not in (None, cat):
                return None
            if f["times"] is not None:
                f["times"] -= 1
                if f["times"] <= 0:
                    self._fault = None
            return f

    def _record(self, entry, status):
        with self._lock:
            entry[3] = status

    async def _client(self, reader, writer):
        self._conns[writer] = asyncio.current_task()
        up = [None, None]  # upstream reader, writer
        try:
            while True:
                await self._one(reader, writer, up)
        except (Closed, asyncio.CancelledError):
            pass
        except Exception as e:  # a client or upstream error ends this connection only
            self._log("connection ended:", repr(e))
        finally:
            self._conns.pop(writer, None)
            writer.close()
            if up[1] is not None:
                up[1].transport.abort()

    async def _one(self, reader, writer, up):
        head = await read_head(reader)
        if head is None:
            raise Closed()
        first, headers = head
        method, target, _version = first.split(" ", 2)
        cat = category(method, target)
        with self._lock:
            self._counts[cat] = self._counts.get(cat, 0) + 1
            entry = [method, target, header(headers, "range"), None]
            self._requests.append(entry)
        self._log(method, target)
        fault = self._take_fault(cat)
        kind = fault["kind"] if fault else None
        params = fault["params"] if fault else {}

        if kind == "reset":
            writer.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            raise Closed()
        if "chunked" in (header(headers, "transfer-encoding") or "").lower():
            await self._error(writer, method, target, 501, entry)
            raise Closed()
        if (header(headers, "expect") or "").lower() == "100-continue":
            headers = [h for h in headers if h[0].lower() != "expect"]
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await reader.readexactly(int(header(headers, "content-length") or 0))
        if kind == "stall":
            while await reader.read(65536):
                pass
            raise Closed()
        delay = self.latency_ms + (params.get("ms", 0) if kind == "latency" else 0)
        if delay:
            await asyncio.sleep(delay / 1000)
        if kind == "status":
            await self._error(writer, method, target, params.get("code", 500), entry, params.get("error_code"))
        else:
            cut = params.get("bytes", 0) if kind == "cut" else None
            await self._forward(writer, up, method, target, encode_head(first, headers) + body, entry, cut)
        if (header(headers, "connection") or "").lower() == "close":
            raise Closed()

    async def _error(self, writer, method, target, code, entry, name=None):
        code_name, message = ERRORS.get(code, ("InternalError", "Injected error"))
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
                '<Resource>%s</Resource><RequestId>s3proxy</RequestId></Error>'
                % (name or code_name, message, target.partition("?")[0])).encode()
        head = encode_head("HTTP/1.1 %d %s" % (code, REASONS.get(code, "Error")), [
            ("Content-Type", "application/xml"), ("Content-Length", str(len(body))),
            ("x-amz-request-id", "s3proxy")])
        self._record(entry, code)
        writer.write(head if method == "HEAD" else head + body)
        await writer.drain()

    async def _forward(self, writer, up, method, target, request, entry, cut):
        """Send the request upstream, relay the response; retry once on a fresh
        connection if a reused one fails before answering."""
        for attempt in (0, 1):
            fresh = up[0] is None or up[0].at_eof()
            if fresh:
                if up[1] is not None:
                    up[1].close()
                try:
                    up[0], up[1] = await asyncio.open_connection(*self.upstream, limit=LIMIT)
                except OSError as e:
                    self._log("upstream unreachable:", e)
                    up[0] = up[1] = None
                    await self._error(writer, method, target, 502, entry)
                    raise Closed()
            try:
                up[1].write(request)
                await up[1].drain()
                while True:  # 1xx interim responses are relayed as they come
                    head = await read_head(up[0])
                    if head is None:
                        raise ConnectionResetError("upstream closed before answering")
                    status = int(head[0].split(" ", 2)[1])
                    if status >= 200:
                        break
                    writer.write(encode_head(*head))
                break
            except (OSError, asyncio.IncompleteReadError):
                up[1].transport.abort()
                up[0] = up[1] = None
                if fresh or attempt:
                    raise
        first, headers = head
        length = header(headers, "content-length")
        chunked = "chunked" in (header(headers, "transfer-encoding") or "").lower()
        no_body = method == "HEAD" or status in (204, 304)
        upstream_closes = (header(headers, "connection") or "").lower() == "close"
        if upstream_closes and (no_body or chunked or length is not None):
            # Connection is hop-by-hop: the client's connection stays open even
            # when the upstream's does not (versitygw closes without --keep-alive).
            headers = [h for h in headers if h[0].lower() not in ("connection", "keep-alive")]
        self._record(entry, status)
        writer.write(encode_head(first, headers))
        budget = [cut]

        async def relay(data):
            if budget[0] is not None:
                data = data[:budget[0]]
                budget[0] -= len(data)
            writer.write(data)
            await writer.drain()
            if budget[0] == 0:
                raise Closed()

        if no_body:
            await writer.drain()
        elif chunked:
            while True:
                line = await up[0].readuntil(b"\r\n")
                await relay(line)
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    while True:  # trailers, up to the empty line
                        line = await up[0].readuntil(b"\r\n")
                        await relay(line)
                        if line == b"\r\n":
                            break
                    break
                await self._copy(up[0], relay, size + 2)
        elif length is not None:
            await self._copy(up[0], relay, int(length))
        else:
            while data := await up[0].read(65536):
                await relay(data)
            raise Closed()
        if cut is not None:
            raise Closed()
        if upstream_closes:
            up[1].close()
            up[0] = up[1] = None

    @staticmethod
    async def _copy(reader, relay, n):
        while n > 0:
            data = await reader.read(min(n, 1 << 16))
            if not data:
                raise asyncio.IncompleteReadError(b"", n)
            n -= len(data)
            await relay(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the S3 server")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on (port 0: any)")
    ap.add_argument("--latency-ms", type=float, default=0, help="delay added before each request")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    up_host, _, up_port = args.upstream.rpartition(":")
    host, _, port = args.listen.rpartition(":")
    p = S3Proxy(int(up_port), latency_ms=args.latency_ms, upstream_host=up_host,
                listen_host=host, port=int(port), verbose=args.verbose).start()
    print("listening on %s:%d" % (host, p.port), flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        p.stop()


if __name__ == "__main__":
    main()
