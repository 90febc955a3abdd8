// The committed src/generated/schema.ts is what `npm run generate` writes from the server's
// OpenAPI document now: a route changed without regenerating fails here.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { packageDir, script } from "./package.js";

test("src/generated/schema.ts matches the OpenAPI document (else: npm run generate)", async () => {
  const { generatedSchema } = await script<{ generatedSchema(): Promise<string> }>("schema.mjs");
  const committed = readFileSync(join(packageDir, "src", "generated", "schema.ts"), "utf8");
  const fresh = await generatedSchema();
  assert.ok(
    committed === fresh,
    "src/generated/schema.ts is out of date with the REST API: run `npm run generate` in clients/typescript and commit it",
  );
});
