// The README's example, as a user copies it: its ```ts block run by Node against the real
// server (test/server.ts), with only the server's address, the key and the project put in.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { packageDir } from "./package.js";
import { testServer, type TestServer } from "./server.js";

let server: TestServer;

before(async () => {
  server = await testServer();
});

after(async () => {
  await server?.stop();
});

/** The README's TypeScript example, made plain JavaScript for this server. */
function example(url: string, apiKey: string, project: string): string {
  const readme = readFileSync(join(packageDir, "README.md"), "utf8");
  const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(block, "the README has a ```ts example");
  const put = (text: string, from: string, to: string): string => {
    assert.ok(text.includes(from), `the example no longer holds ${from}`);
    return text.replace(from, to);
  };
  let js = put(block, '"http://127.0.0.1:8420"', JSON.stringify(url));
  js = put(js, "process.env.KEEPSTONE_TOKEN!", JSON.stringify(apiKey));
  return put(js, 'project: "web"', `project: ${JSON.stringify(project)}`);
}

test("the README's example runs as written", async () => {
  const project = `readme-${randomBytes(4).toString("hex")}`;
  // Inside the package, so `import ... from "keepstone"` resolves through its exports map.
  const file = join(packageDir, "dist", `readme-example-${project}.mjs`);
  writeFileSync(file, example(server.url, server.apiKey, project));
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [file]);
    assert.match(stdout, /<!-- owner: ops -->\n# Deploy\n\nport 8421\n/);
    assert.match(stdout, /notes\/deploy\.md/);
    assert.match(stdout, /422 invalid_edit /);
  } finally {
    rmSync(file, { force: true });
  }
});
