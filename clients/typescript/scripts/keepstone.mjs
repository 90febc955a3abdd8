// Where the `keepstone` command is: $KEEPSTONE_BIN, else the repository's .venv (make dev),
// else `keepstone` on the PATH. Used by `npm run generate` and by the tests' server.
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");

export function keepstoneBin() {
  if (process.env.KEEPSTONE_BIN) return process.env.KEEPSTONE_BIN;
  const venv = join(packageDir, "..", "..", ".venv", "bin", "keepstone");
  return existsSync(venv) ? venv : "keepstone";
}
