// The Memory class against a real Keepstone server (test/server.ts): every verb, and the
// server's refusals thrown as KeepstoneError with its code, message and status.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
// Through the package's own name: its "exports" map, as a user imports it.
import { KeepstoneError, Memory } from "keepstone";
import { refusal } from "./refusal.js";
import { testServer, type TestServer } from "./server.js";

let server: TestServer;
let memory: Memory;

before(async () => {
  server = await testServer();
  // A space of its own per run, so a server named by KEEPSTONE_SERVER may be reused.
  const name = `ts-${randomBytes(4).toString("hex")}`;
  memory = new Memory({ baseUrl: server.url, apiKey: server.apiKey, name, project: "ts-client" });
});

after(async () => {
  await server?.stop();
});

describe("documents", () => {
  test("write creates then replaces, read answers the content and etag", async () => {
    const created = await memory.write("notes/deploy.md", "# Deploy\n\nport 8000\n");
    assert.equal(created.created, true);
    assert.equal(created.path, "notes/deploy.md");
    assert.equal(created.size_bytes, "# Deploy\n\nport 8000\n".length);
    const replaced = await memory.write("notes/deploy.md", "# Deploy\n\nport 8000, tls\n");
    assert.equal(replaced.created, false);
    const doc = await memory.read("notes/deploy.md");
    assert.equal(doc.content, "# Deploy\n\nport 8000, tls\n");
    assert.equal(doc.etag, replaced.etag);
    assert.ok(!Number.isNaN(Date.parse(doc.updated_at)));
  });

  test("edit replaces one exact occurrence or inserts lines, If-Match honoured", async () => {
    const first = await memory.write("todo.md", "- ship\n- test\n");
    const edited = await memory.edit("todo.md", { old: "- ship", new: "- ship v2" });
    assert.equal(edited.created, false);
    assert.notEqual(edited.etag, first.etag);
    await memory.edit("todo.md", { insert_line: 0, text: "# Todo" }, { if_match: edited.etag });
    assert.equal((await memory.read("todo.md")).content, "# Todo\n- ship v2\n- test\n");

    const stale = await refusal(memory.edit("todo.md", { old: "test", new: "t" }, { if_match: first.etag }));
    assert.equal(stale.code, "precondition_failed");
    assert.equal(stale.status, 412);

    const ambiguous = await refusal(memory.edit("todo.md", { old: "- ", new: "* " }));
    assert.equal(ambiguous.code, "invalid_edit");
    assert.equal(ambiguous.status, 422);
    assert.equal(ambiguous.details.occurrences, 2);
    assert.deepEqual(ambiguous.details.lines, [2, 3]);
    assert.match(ambiguous.message, /occurs 2 times/);
    assert.equal((await memory.read("todo.md")).content, "# Todo\n- ship v2\n- test\n");
  });

  test("move to a free path, already_exists at a taken one unless overwrite", async () => {
    await memory.write("a.md", "A\n");
    await memory.write("b.md", "B\n");
    const taken = await refusal(memory.move("a.md", "b.md"));
    assert.equal(taken.code, "already_exists");
    assert.equal(taken.status, 409);
    const moved = await memory.move("a.md", "c.md");
    assert.equal(moved.path, "c.md");
    assert.equal(moved.created, true);
    const over = await memory.move("c.md", "b.md", { overwrite: true });
    assert.equal(over.created, false);
    assert.equal((await memory.read("b.md")).content, "A\n");
  });

  test("delete, then the document is not_found", async () => {
    const written = await memory.write("gone.md", "bye\n");
    const stale = await refusal(memory.delete("gone.md", { if_match: "0000" }));
    assert.equal(stale.code, "precondition_failed");
    await memory.delete("gone.md", { if_match: written.etag });
    const missing = await refusal(memory.read("gone.md"));
    assert.equal(missing.code, "not_found");
    assert.equal(missing.status, 404);
    assert.ok(missing.message.length > 0);
  });

  test("list sorted by path, under a directory prefix", async () => {
    await memory.write("dir/one.md", "1\n");
    await memory.write("dir/two.md", "22\n");
    const listed = await memory.list("dir");
    assert.deepEqual(
      listed.map((d) => [d.path, d.size_bytes]),
      [
        ["dir/one.md", 2],
        ["dir/two.md", 3],
      ],
    );
    const all = (await memory.list()).map((d) => d.path);
    assert.deepEqual(all, [...all].sort());
    assert.ok(all.includes("notes/deploy.md"));
  });

  test("search finds a section by keyword", async () => {
    await memory.write("runbook.md", "# Falcon\n\nRestart the falcon worker with make bounce.\n");
    const found = await memory.search("falcon worker", { limit: 5 });
    assert.ok(found.results.length >= 1, JSON.stringify(found));
    assert.equal(found.results[0]?.path, "runbook.md");
    const none = await memory.search("falcon", { path_prefix: "dir/" });
    assert.deepEqual(none.results, []);
    const bad = await refusal(memory.search("falcon", { limit: 500 }));
    assert.equal(bad.status, 400);
  });
});

describe("history", () => {
  test("versions, a version's read, diff and restore", async () => {
    await memory.write("h.md", "one\n");
    await memory.write("h.md", "two\n");
    const versions = await memory.versions("h.md");
    assert.deepEqual(
      versions.map((v) => [v.version, v.size, v.deleted]),
      [
        [2, 4, false],
        [1, 4, false],
      ],
    );
    assert.equal((await memory.read("h.md", { version: 1 })).content, "one\n");
    const diff = await memory.diff("h.md", 1);
    assert.match(diff, /^-one$/m);
    assert.match(diff, /^\+two$/m);
    assert.equal(await memory.diff("h.md", 2, 2), "");
    const restored = await memory.restore("h.md", 1);
    assert.equal(restored.created, false);
    assert.equal((await memory.read("h.md")).content, "one\n");
    const missing = await refusal(memory.read("h.md", { version: 99 }));
    assert.equal(missing.code, "not_found");
  });

  test("read and list as of an instant", async () => {
    await memory.write("t.md", "before\n");
    await new Promise((resolve) => setTimeout(resolve, 50));
    const at = new Date();
    await new Promise((resolve) => setTimeout(resolve, 50));
    await memory.write("t.md", "after\n");
    assert.equal((await memory.read("t.md", { as_of: at })).content, "before\n");
    const then = await memory.list("", { as_of: at.toISOString() });
    assert.ok(then.some((d) => d.path === "t.md"));
  });
});

describe("the space and the key", () => {
  test("usage and the readable spaces", async () => {
    const used = await memory.usage();
    assert.ok(used.used_bytes > 0);
    const spaces = await memory.spaces();
    assert.ok(spaces.spaces.some((s) => s.space.name === memory.space.name));
  });

  test("a bad key is unauthenticated, an unreachable server store_unavailable", async () => {
    const stranger = new Memory({ baseUrl: server.url, apiKey: "keepstone_nope", name: "x", project: "p" });
    const refused = await refusal(stranger.list());
    assert.equal(refused.code, "unauthenticated");
    assert.equal(refused.status, 401);
    const nowhere = new Memory({ baseUrl: "http://127.0.0.1:9", apiKey: "k", project: "p" });
    const down = await refusal(nowhere.list());
    assert.equal(down.code, "store_unavailable");
    assert.equal(down.status, 0);
  });

  test("what the caller gave wrong is invalid_request, never an outage", async () => {
    const refused = await refusal(memory.read("a.md", { as_of: new Date("x") }));
    assert.equal(refused.code, "invalid_request");
    assert.match(refused.message, /^as_of is an invalid Date/);
    const since = await refusal(memory.search("x", { since: new Date(Number.NaN) }));
    assert.match(since.message, /^since is an invalid Date/);
    assert.throws(
      () => new Memory({ baseUrl: server.url, apiKey: "key-€", project: "p" }),
      (error) => error instanceof KeepstoneError && error.code === "invalid_request",
    );
    const etag = await refusal(memory.write("a.md", "x", { if_match: 'a"\r\nX-Evil: 1' }));
    assert.equal(etag.code, "invalid_request");
    assert.match(etag.message, /^if_match holds a space, a control character or a letter outside ASCII/);
  });

  test("a parameter of the wrong space is refused by name", async () => {
    const botless = new Memory({ baseUrl: server.url, apiKey: server.apiKey, visibility: "bot" });
    const refused = await refusal(botless.list());
    assert.equal(refused.status, 400);
    assert.equal(refused.code, "invalid_space_ref");
  });
});
