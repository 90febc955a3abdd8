export { KeepstoneError } from "./errors.js";
export {
  Memory,
  type Document,
  type DocumentInfo,
  type Edit,
  type IfMatch,
  type Instant,
  type MemoryOptions,
  type SearchHit,
  type SearchOptions,
  type SearchResult,
  type Spaces,
  type Usage,
  type Version,
  type Visibility,
  type WriteResult,
} from "./memory.js";
export type { components, operations, paths } from "./generated/schema.js";
