// `npm run generate`: export the REST API's OpenAPI document from keepstone (`keepstone
// openapi`) and turn it into src/generated/schema.ts with openapi-typescript. The output is
// committed; test/generated.test.ts fails when it no longer matches what this writes.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { generatedSchema } from "./schema.mjs";
import { packageDir } from "./keepstone.mjs";

const target = join(packageDir, "src", "generated", "schema.ts");
writeFileSync(target, await generatedSchema());
console.log(`wrote ${target}`);
