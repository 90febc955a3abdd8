// How a request travels, against raw sockets that misbehave as a network or a proxy does:
// one more try of an idempotent request whose connection broke before any answer (never of
// a POST), a connection that breaks halfway through an answer, a server that never answers
// (timeoutMs), a refused connection; and what the constructor refuses before any request.
import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import { after, describe, test } from "node:test";
import { KeepstoneError, Memory } from "keepstone";
import { refusal } from "./refusal.js";

const servers: Server[] = [];
const sockets = new Set<Socket>();

after(async () => {
  for (const socket of sockets) socket.destroy();
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
});

/** A loopback server that hands each request's socket to `onRequest` (with the request's
 * number, from 1); its address, and how many requests it read. */
async function rawServer(
  onRequest: (socket: Socket, n: number) => void,
): Promise<{ url: string; requests: () => number }> {
  let requests = 0;
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    let head = "";
    socket.on("data", (chunk) => {
      head += chunk.toString("latin1");
      if (!head.includes("\r\n\r\n")) return;
      head = "";
      requests += 1;
      onRequest(socket, requests);
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address && typeof address === "object");
  return { url: `http://127.0.0.1:${address.port}`, requests: () => requests };
}

function answer(socket: Socket, body: string): void {
  const status = body ? "200 OK" : "204 No Content";
  const type = body ? "Content-Type: application/json\r\n" : "";
  socket.end(
    `HTTP/1.1 ${status}\r\n${type}Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

const LISTING =
  '{"documents": [{"path": "a.md", "size_bytes": 1, "updated_at": "2025-01-01T00:00:00+00:00", "etag": "e"}]}';
const WRITTEN = '{"path": "a.md", "size_bytes": 1, "etag": "e", "created": true}';

describe("a connection that breaks before any answer", () => {
  test("an idempotent request (GET, PUT, DELETE) is sent once more", async () => {
    const answers = ["", LISTING, "", WRITTEN, "", ""];
    const server = await rawServer((socket, n) =>
      n % 2 === 1 ? socket.destroy() : answer(socket, answers[n - 1] ?? ""),
    );
    const memory = new Memory({ baseUrl: server.url, apiKey: "k", project: "p" });
    assert.deepEqual(
      (await memory.list()).map((d) => d.path),
      ["a.md"],
    );
    assert.equal(server.requests(), 2);
    assert.equal((await memory.write("a.md", "x")).created, true);
    assert.equal(server.requests(), 4);
    await memory.delete("a.md");
    assert.equal(server.requests(), 6);
  });

  test("only once: a second break is store_unavailable", async () => {
    const server = await rawServer((socket) => socket.destroy());
    const memory = new Memory({ baseUrl: server.url, apiKey: "k", project: "p" });
    const error = await refusal(memory.read("a.md"));
    assert.deepEqual([error.code, error.status], ["store_unavailable", 0]);
    assert.match(
      error.message,
      new RegExp(`^cannot reach the Keepstone server at ${server.url}: other side closed`),
    );
    assert.equal(server.requests(), 2);
  });

  test("a POST (edit, move, restore) is never sent twice", async () => {
    const server = await rawServer((socket, n) =>
      n === 1 ? socket.destroy() : answer(socket, WRITTEN),
    );
    const memory = new Memory({ baseUrl: server.url, apiKey: "k", project: "p" });
    const error = await refusal(memory.edit("a.md", { old: "a", new: "b" }));
    assert.equal(error.code, "store_unavailable");
    assert.equal(server.requests(), 1);
  });
});

describe("an answer that does not come whole", () => {
  test("a connection broken halfway through the body says so, with the status", async () => {
    const server = await rawServer((socket) => {
      socket.write(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n",
      );
      socket.write('{"documents": [', () => socket.destroy());
    });
    const memory = new Memory({ baseUrl: server.url, apiKey: "k", project: "p" });
    const error = await refusal(memory.list());
    assert.deepEqual([error.code, error.status], ["store_unavailable", 0]);
    assert.match(
      error.message,
      new RegExp(
        `^the connection to the Keepstone server at ${server.url} broke while its answer \\(HTTP 200\\) was being read: `,
      ),
    );
    assert.equal(server.requests(), 1);
  });

  test("a server that never answers is given up on after timeoutMs, never tried again", async () => {
    const server = await rawServer(() => undefined);
    const memory = new Memory({ baseUrl: server.url, apiKey: "k", project: "p", timeoutMs: 50 });
    const error = await refusal(memory.read("a.md"));
    assert.deepEqual([error.code, error.status], ["store_unavailable", 0]);
    assert.equal(
      error.message,
      `the Keepstone server at ${server.url} did not answer within 50 ms: check that it is not overloaded, or give a longer timeoutMs`,
    );
    assert.equal(server.requests(), 1);
  });

  test("a refused connection names why, and is not tried again", async () => {
    const probe = await rawServer(() => undefined);
    const closing = servers.pop();
    await new Promise((resolve) => closing?.close(resolve));
    const memory = new Memory({ baseUrl: probe.url, apiKey: "k", project: "p" });
    const error = await refusal(memory.list());
    assert.deepEqual([error.code, error.status], ["store_unavailable", 0]);
    assert.match(
      error.message,
      new RegExp(
        `^cannot reach the Keepstone server at ${probe.url}: connect ECONNREFUSED .*; check that it is running and that baseUrl is its address$`,
      ),
    );
  });
});

describe("what the constructor refuses, before any request", () => {
  const refused = (
    options: Partial<ConstructorParameters<typeof Memory>[0]>,
    message: RegExp,
  ): void => {
    assert.throws(
      () => new Memory({ baseUrl: "http://127.0.0.1:8420", apiKey: "k", ...options }),
      (error) =>
        error instanceof KeepstoneError &&
        error.code === "invalid_request" &&
        error.status === 400 &&
        message.test(error.message),
    );
  };

  test("a base URL that is not http(s) with a host, as the Python client refuses it", () => {
    refused(
      { baseUrl: "127.0.0.1:8420" },
      /^baseUrl "127\.0\.0\.1:8420" cannot be used \(it needs http:\/\/ or https:\/\/ and a host\); give one like http:\/\/127\.0\.0\.1:8420$/,
    );
    refused({ baseUrl: "ftp://example.com" }, /^baseUrl "ftp:\/\/example\.com" cannot be used/);
    refused({ baseUrl: "" }, /^baseUrl "" cannot be used \(it is empty\)/);
  });

  test("an API key or team a header cannot carry: a space refused too, as the Python client does", () => {
    refused(
      { apiKey: "key with space" },
      /^apiKey holds a space, a control character or a letter outside ASCII/,
    );
    refused({ team: "team one" }, /^team holds a space, a control character/);
  });

  test("a timeout that is not a number of milliseconds above 0", () => {
    for (const timeoutMs of [0, -1, Number.NaN, 2 ** 31]) {
      refused(
        { timeoutMs },
        /^timeoutMs is .*; give a number of milliseconds from 1 to 2147483647 \(default 60000\), or Infinity for no limit$/,
      );
    }
    assert.ok(new Memory({ baseUrl: "http://127.0.0.1:8420", apiKey: "k", timeoutMs: Infinity }));
  });
});
