// What the tests expect of a call that must fail: the KeepstoneError it throws.
import assert from "node:assert/strict";

import { KeepstoneError } from "keepstone";

/** The {@link KeepstoneError} `work` rejects with; the test fails on anything else. */
export async function refusal(work: Promise<unknown>): Promise<KeepstoneError> {
  try {
    await work;
  } catch (error) {
    assert.ok(error instanceof KeepstoneError, `not a KeepstoneError: ${String(error)}`);
    return error;
  }
  assert.fail("expected a KeepstoneError");
}
