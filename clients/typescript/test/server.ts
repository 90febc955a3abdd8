// The server the tests talk to: the one KEEPSTONE_SERVER names (with the API key in
// KEEPSTONE_TOKEN), else a real `keepstone serve` started here on a free loopback port, over
// SQLite in a temporary directory, with an API key minted through the admin API.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { script } from "./package.js";

const READY_TIMEOUT_MS = 90_000;

export interface TestServer {
  url: string;
  apiKey: string;
  stop(): Promise<void>;
}

export async function testServer(): Promise<TestServer> {
  const url = process.env.KEEPSTONE_SERVER;
  if (url) {
    const apiKey = process.env.KEEPSTONE_TOKEN;
    if (!apiKey) throw new Error("KEEPSTONE_SERVER is set: set KEEPSTONE_TOKEN to an API key too");
    return { url, apiKey, stop: async () => {} };
  }
  return startServer();
}

async function startServer(): Promise<TestServer> {
  const dir = mkdtempSync(join(tmpdir(), "keepstone-ts-"));
  const port = await freePort();
  const admin = randomBytes(16).toString("hex");
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith("KEEPSTONE_") && v !== undefined) env[k] = v;
  }
  Object.assign(env, {
    KEEPSTONE_HOME: join(dir, "home"),
    KEEPSTONE_DATABASE_URL: `sqlite:///${join(dir, "keepstone.db")}`,
    KEEPSTONE_ADMIN_TOKEN: admin,
    KEEPSTONE_KEY_HASH_SECRET: randomBytes(16).toString("hex"),
    KEEPSTONE_ARGON2_TIME_COST: "1",
    KEEPSTONE_ARGON2_MEMORY_KIB: "1024",
    // Keyword search only: no model to load, and what is written is searchable at once.
    KEEPSTONE_EMBEDDER: "none",
    KEEPSTONE_INDEXER: "off",
  });
  const logPath = join(dir, "serve.log");
  const log = openSync(logPath, "a");
  const { keepstoneBin } = await script<{ keepstoneBin(): string }>("keepstone.mjs");
  const bin = keepstoneBin();
  const proc = spawn(bin, ["serve", "--host", "127.0.0.1", "--port", String(port)], {
    env,
    stdio: ["ignore", log, log],
  });
  closeSync(log);
  const serverUrl = `http://127.0.0.1:${port}`;
  const stop = async (): Promise<void> => {
    await stopProcess(proc);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitReady(proc, serverUrl, () => readFileSync(logPath, "utf8"), bin);
    const apiKey = await mintKey(serverUrl, admin);
    return { url: serverUrl, apiKey, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      const port = typeof address === "object" && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

async function waitReady(
  proc: ChildProcess,
  url: string,
  logText: () => string,
  bin: string,
): Promise<void> {
  let exited: string | undefined;
  proc.once("exit", (code, signal) => (exited = `exited (${code ?? signal})`));
  proc.once("error", (error) => (exited = `did not start (${error.message})`));
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (exited !== undefined) {
      throw new Error(`${bin} serve ${exited} before answering:\n${logText().slice(-4000)}`);
    }
    if (Date.now() > deadline) {
      throw new Error(`${bin} serve did not answer on /readyz:\n${logText().slice(-4000)}`);
    }
    try {
      if ((await fetch(`${url}/readyz`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** An org, a team, a user who is a member of it, and that user's API key in the team. */
async function mintKey(url: string, admin: string): Promise<string> {
  const post = async (path: string, body: object): Promise<Record<string, unknown>> => {
    const answer = await fetch(`${url}${path}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!answer.ok) throw new Error(`POST ${path}: ${answer.status} ${await answer.text()}`);
    return (await answer.json()) as Record<string, unknown>;
  };
  const org = await post("/api/admin/orgs", { name: "ts-client", plan: "pro_plus" });
  const team = await post("/api/admin/teams", { org_id: org.id, name: "ts" });
  const user = await post("/api/admin/users", {
    email: `ts-${randomBytes(4).toString("hex")}@example.com`,
    password: randomBytes(12).toString("hex"),
  });
  await post(`/api/admin/teams/${team.id}/members`, { user_id: user.id, role: "member" });
  const key = await post("/api/admin/api-keys", { user_id: user.id, team_id: team.id, name: "ts-client tests" });
  return String(key.key);
}

async function stopProcess(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((resolve) => proc.once("exit", resolve));
  proc.kill("SIGTERM");
  const timer = setTimeout(() => proc.kill("SIGKILL"), 20_000);
  await exited;
  clearTimeout(timer);
}
