// What the client makes of answers a Keepstone server never gives but a proxy, another
// server or a cut connection does: an HTML 502, a plain-text 500, an empty or cut-short 2xx,
// JSON of another shape, a redirect. Each is a KeepstoneError that says the server answered
// (its HTTP status), what the body was and what to check, with the code the Python client
// gives (keepstone.errors.error_from_wire; keepstone.tools.records for a 2xx it cannot read),
// never an unreachable server. The answers come from a fetch given to the client.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { KeepstoneError, Memory } from "keepstone";
import { refusal } from "./refusal.js";

const BASE = "http://keepstone.test";

interface Sent {
  method: string;
  url: string;
  redirect: RequestRedirect;
}

/** A Memory whose every request is answered with `answer`; what it sent, in `sent`. */
function answering(answer: () => Response): { memory: Memory; sent: Sent[] } {
  const sent: Sent[] = [];
  const fetch = async (request: Request): Promise<Response> => {
    sent.push({ method: request.method, url: request.url, redirect: request.redirect });
    return answer();
  };
  const memory = new Memory({ baseUrl: BASE, apiKey: "k", project: "p", fetch });
  return { memory, sent };
}

function reply(status: number, body: string, headers: Record<string, string> = {}): () => Response {
  return () => new Response(status === 204 ? null : body, { status, headers });
}

const NGINX_502 =
  "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";

describe("an error answer whose body is not JSON", () => {
  test("nginx's HTML 502 is internal_error naming the status, the body and the proxy", async () => {
    const { memory } = answering(reply(502, NGINX_502, { "Content-Type": "text/html" }));
    const error = await refusal(memory.read("a.md"));
    assert.equal(error.code, "internal_error");
    assert.equal(error.status, 502);
    assert.match(
      error.message,
      /^the server answered HTTP 502 with a body that is not JSON \(text\/html, \d+ bytes: "<html> <head><title>502 Bad Gateway/,
    );
    assert.match(
      error.message,
      /: check that the Keepstone server behind http:\/\/keepstone\.test is running, and the log of any proxy in front of it \(which may have answered for it\)$/,
    );
    assert.doesNotMatch(error.message, /cannot reach/);
  });

  test("a plain-text 500 is internal_error, its text quoted", async () => {
    const { memory } = answering(
      reply(500, "Internal Server Error", { "Content-Type": "text/plain; charset=utf-8" }),
    );
    const error = await refusal(memory.write("a.md", "x"));
    assert.equal(error.code, "internal_error");
    assert.equal(error.status, 500);
    assert.match(
      error.message,
      /^the server answered HTTP 500 with a body that is not JSON \(text\/plain, 21 bytes: "Internal Server Error"\)/,
    );
  });

  test("the code is the one the Python client names the status by", async () => {
    const cases: [number, string][] = [
      [400, "bad_request"],
      [401, "unauthenticated"],
      [403, "forbidden"],
      [404, "not_found"],
      [409, "conflict"],
      [413, "too_large"],
      [422, "unprocessable"],
      [429, "rate_limited"],
      [503, "store_unavailable"],
      [504, "internal_error"],
      [418, "internal_error"],
    ];
    for (const [status, code] of cases) {
      const { memory } = answering(
        reply(status, "<html>no</html>", { "Content-Type": "text/html" }),
      );
      const error = await refusal(memory.list());
      assert.deepEqual([error.status, error.code], [status, code]);
      assert.match(
        error.message,
        new RegExp(`^the server answered HTTP ${status} with a body that is not JSON`),
      );
    }
  });

  test("a 4xx from another server says to check the address", async () => {
    const { memory } = answering(reply(404, "<h1>Not Found</h1>", { "Content-Type": "text/html" }));
    const error = await refusal(memory.read("a.md"));
    assert.match(
      error.message,
      /: check that http:\/\/keepstone\.test is the Keepstone server's address/,
    );
  });

  test("an empty error body is named as empty", async () => {
    const { memory } = answering(reply(503, ""));
    const error = await refusal(memory.search("x"));
    assert.equal(error.code, "store_unavailable");
    assert.equal(error.status, 503);
    assert.match(error.message, /^the server answered HTTP 503 with an empty body: /);
  });

  test("JSON that is no Keepstone error is named by the status, and said so", async () => {
    const { memory } = answering(
      reply(404, '{"detail": "Not Found"}', { "Content-Type": "application/json" }),
    );
    const error = await refusal(memory.read("a.md"));
    assert.equal(error.code, "not_found");
    assert.match(
      error.message,
      /^the server answered HTTP 404 with a JSON body that is no Keepstone error/,
    );
  });

  test("the server's own error stands as it said it, a missing message by the status", async () => {
    const body = { error: { code: "invalid_edit", message: "no such text", lines: [1] } };
    const { memory } = answering(
      reply(422, JSON.stringify(body), { "Content-Type": "application/json" }),
    );
    const error = await refusal(memory.edit("a.md", { old: "x", new: "y" }));
    assert.deepEqual(
      [error.code, error.message, error.details],
      ["invalid_edit", "no such text", { lines: [1] }],
    );
    const bare = answering(reply(409, '{"error": {"code": "memory_off"}}')).memory;
    const off = await refusal(bare.list());
    assert.deepEqual([off.code, off.message], ["memory_off", "the server answered HTTP 409"]);
  });

  test("rate_limited carries Retry-After in seconds, 1 when it names none", async () => {
    const body = JSON.stringify({ error: { code: "rate_limited", message: "slow down" } });
    const limited = answering(reply(429, body, { "Retry-After": "7" })).memory;
    assert.equal((await refusal(limited.list())).retry_after, 7);
    const proxy = answering(
      reply(429, "<html>429</html>", { "Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT" }),
    ).memory;
    const error = await refusal(proxy.list());
    assert.deepEqual([error.code, error.retry_after], ["rate_limited", 1]);
    const other = answering(reply(404, '{"error": {"code": "not_found", "message": "no"}}')).memory;
    assert.equal((await refusal(other.list())).retry_after, undefined);
  });
});

describe("a 2xx answer that is not the JSON asked for", () => {
  const notJson =
    /^the server answered HTTP 200 with (a body that is not JSON|an empty body) .*where JSON was expected: check that http:\/\/keepstone\.test is the Keepstone server's address/;

  test("an empty 200 is store_unavailable with status 200, never an unreachable server", async () => {
    const { memory } = answering(reply(200, "", { "Content-Type": "application/json" }));
    const error = await refusal(memory.read("a.md"));
    assert.equal(error.code, "store_unavailable");
    assert.equal(error.status, 200);
    assert.match(
      error.message,
      /^the server answered HTTP 200 with an empty body where JSON was expected/,
    );
    assert.match(error.message, notJson);
  });

  test("a 200 of HTML, of cut-short JSON, and a 204, each said so", async () => {
    const html = answering(
      reply(200, "<!doctype html><title>Sign in</title>", { "Content-Type": "text/html" }),
    ).memory;
    const page = await refusal(html.list());
    assert.match(
      page.message,
      /^the server answered HTTP 200 with a body that is not JSON \(text\/html, 37 bytes: "<!doctype html><title>Sign in<\/title>"\) where JSON/,
    );
    assert.match(page.message, notJson);
    const cut = answering(
      reply(200, '{"documents": [', { "Content-Type": "application/json" }),
    ).memory;
    const short = await refusal(cut.list());
    assert.equal(short.code, "store_unavailable");
    assert.match(
      short.message,
      /^the server answered HTTP 200 with a body that is not JSON \(application\/json, 15 bytes: "\{\\"documents\\": \["\)/,
    );
    const none = answering(reply(204, "")).memory;
    const empty = await refusal(none.usage());
    assert.deepEqual([empty.code, empty.status], ["store_unavailable", 204]);
    assert.match(
      empty.message,
      /^the server answered HTTP 204 with an empty body where JSON was expected/,
    );
  });

  test("JSON of another shape is store_unavailable naming what was wrong with it", async () => {
    const cases: [(m: Memory) => Promise<unknown>, string, RegExp][] = [
      [
        (m) => m.list(),
        '{"x": 1}',
        /JSON that is not a listing of documents \("documents" is missing\)/,
      ],
      [
        (m) => m.read("a.md"),
        "[1, 2]",
        /JSON that is not a document \(it is a list, not an object\)/,
      ],
      [(m) => m.read("a.md"), "null", /JSON that is not a document \(it is null, not an object\)/],
      [
        (m) => m.write("a.md", "x"),
        '{"path": "a.md", "etag": "e", "size_bytes": 1, "created": "yes"}',
        /JSON that is not a write's answer \("created" is a string, not a boolean\)/,
      ],
      [
        (m) => m.versions("a.md"),
        '{"versions": {}}',
        /not a list of versions \("versions" is an object, not a list\)/,
      ],
      [(m) => m.search("q"), '{"hits": []}', /not a search's answer \("results" is missing\)/],
      [
        (m) => m.spaces(),
        '{"spaces": null}',
        /not a list of spaces \("spaces" is null, not a list\)/,
      ],
      [(m) => m.usage(), '{"space_id": "s"}', /not a space's usage \("used_bytes" is missing\)/],
    ];
    for (const [call, body, why] of cases) {
      const { memory } = answering(reply(200, body, { "Content-Type": "application/json" }));
      const error = await refusal(call(memory));
      assert.deepEqual([error.code, error.status], ["store_unavailable", 200], body);
      assert.match(error.message, /^the server answered HTTP 200 with JSON that is not /);
      assert.match(error.message, why);
      assert.match(
        error.message,
        /check that http:\/\/keepstone\.test is the address of a Keepstone server/,
      );
    }
  });

  test("a delete's empty 204 and a diff's text are what they ask for", async () => {
    assert.equal(await answering(reply(204, "")).memory.delete("a.md"), undefined);
    const diff = answering(reply(200, "-a\n+b\n", { "Content-Type": "text/x-diff" })).memory;
    assert.equal(await diff.diff("a.md", 1), "-a\n+b\n");
  });
});

describe("a redirect", () => {
  test("is not followed: store_unavailable naming the status and where it leads", async () => {
    const { memory, sent } = answering(
      reply(301, "", { Location: "https://keepstone.test/api/memory/doc/edit" }),
    );
    const error = await refusal(memory.edit("a.md", { old: "x", new: "y" }));
    assert.deepEqual([error.code, error.status], ["store_unavailable", 301]);
    assert.equal(
      error.message,
      "the server at http://keepstone.test answered HTTP 301, a redirect to https://keepstone.test/api/memory/doc/edit: give the address it redirects to as baseUrl (redirects are not followed)",
    );
    assert.deepEqual(
      sent.map((s) => [s.method, s.redirect]),
      [["POST", "manual"]],
    );
  });
});
