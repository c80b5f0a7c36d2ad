/**
 * The real test stack for these tests: `python -m sidecar.testing` (the LLM simulator, the
 * example tool servers and a sidecar), started once per test file.
 *
 * The interpreter comes from `AGENT_SIDECAR_PYTHON` (the Makefile sets the repository's
 * `.venv/bin/python`); it runs in the repository root, three levels above this package.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { createInterface } from "node:readline";

/** Where the stack's servers listen, as the launcher prints them. */
export interface StackAddresses {
  sidecar: string;
  simulator: string;
  tool_servers: Record<string, string>;
  profiles: string[];
}

/** A running stack; {@link Stack.stop} ends it. */
export interface Stack {
  readonly addresses: StackAddresses;
  readonly sidecar: string;
  stop(): Promise<void>;
}

const HERE = path.dirname(fileURLToPath(import.meta.url));
/** The repository root: this file runs as clients/typescript/build/test/stack.js. */
export const REPO_ROOT = path.resolve(HERE, "..", "..", "..", "..");
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;

/** Starts the launcher and resolves once it prints the sidecar's address. */
export async function startStack(flags: readonly string[] = []): Promise<Stack> {
  const python = process.env.AGENT_SIDECAR_PYTHON ?? path.join(REPO_ROOT, ".venv", "bin", "python");
  const child = spawn(python, ["-m", "sidecar.testing", ...flags], {
    cwd: REPO_ROOT,
    stdio: ["pipe", "pipe", "pipe"],
  });
  const stderr: string[] = [];
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (chunk: string) => {
    stderr.push(chunk);
    if (stderr.length > 200) stderr.shift();
  });
  const exited = once(child, "exit");
  try {
    const addresses = await readAddresses(child, exited, stderr);
    return { addresses, sidecar: addresses.sidecar, stop: () => stopStack(child, exited) };
  } catch (error) {
    await stopStack(child, exited);
    throw error;
  }
}

async function readAddresses(
  child: ChildProcess,
  exited: Promise<unknown[]>,
  stderr: readonly string[],
): Promise<StackAddresses> {
  const stdout = child.stdout;
  if (!stdout) throw new Error("the launcher has no stdout");
  const lines = createInterface({ input: stdout });
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`the launcher printed no address in ${START_TIMEOUT_MS} ms:\n${stderr.join("")}`)),
      START_TIMEOUT_MS,
    );
  });
  const early = exited.then(([code, signal]) => {
    throw new Error(`the launcher exited (${String(code ?? signal)}) before it was ready:\n${stderr.join("")}`);
  });
  const ready = (async () => {
    let addresses: StackAddresses | undefined;
    for await (const line of lines) {
      if (line.startsWith("stack ")) {
        addresses = JSON.parse(line.slice("stack ".length)) as StackAddresses;
      } else if (line.startsWith("listening on ") && addresses) {
        return addresses;
      }
    }
    throw new Error(`the launcher closed its stdout before it was ready:\n${stderr.join("")}`);
  })();
  try {
    return await Promise.race([ready, early, timeout]);
  } finally {
    clearTimeout(timer);
    early.catch(() => undefined);
    lines.close();
  }
}

/** Closes the launcher's stdin (its signal to stop) and waits for it; SIGKILL past a bound. */
async function stopStack(child: ChildProcess, exited: Promise<unknown[]>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.stdin?.end();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), STOP_TIMEOUT_MS);
  });
  if ((await Promise.race([exited, late])) === "late") {
    child.kill("SIGKILL");
    await exited;
  }
  clearTimeout(timer);
}

/** Polls `check` until it returns true; fails after `timeoutMs`. */
export async function eventually(
  check: () => Promise<boolean>,
  { timeoutMs = 10_000, intervalMs = 20 } = {},
): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > end) throw new Error(`not true within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
