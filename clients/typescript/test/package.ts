// The package's own directory and its plain .mjs scripts, from the compiled tests
// (dist/test/*.js): the scripts are shared with `npm run generate` and are not compiled.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

export async function script<T>(name: string): Promise<T> {
  return (await import(pathToFileURL(join(packageDir, "scripts", name)).href)) as T;
}
