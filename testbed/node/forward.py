"""The kubernetes Service's ClusterIP, as kube-proxy's old userspace mode served it:

    python -m testbed.node.forward LISTEN_IP:PORT TARGET_IP:PORT

accepts TCP connections on the Service's address (198.18.x.129:443, on the cluster's service
bridge) and copies bytes both ways to the API server on loopback. In-cluster clients (Argo's
executor, the gang watch) reach the API server through KUBERNETES_SERVICE_HOST/PORT, which the
kubelet sets from that Service, as on a cluster; nothing else is proxied (the cluster has no
kube-proxy: other ClusterIPs carry no traffic, headless Services need none).
"""

from __future__ import annotations

import asyncio
import signal
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except RuntimeError:
            pass


async def serve(listen: tuple[str, int], target: tuple[str, int]) -> None:
    async def connection(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(*target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, server_writer), _pipe(server_reader, client_writer))

    server = await asyncio.start_server(connection, *listen, reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"forwarding {listen[0]}:{listen[1]} -> {target[0]}:{target[1]}", flush=True)
    async with server:
        await stop.wait()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m testbed.node.forward LISTEN_IP:PORT TARGET_IP:PORT", file=sys.stderr)
        return 2
    asyncio.run(serve(_address(argv[0]), _address(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
