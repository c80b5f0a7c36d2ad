// A tool server for the lifecycle and identity tests, run as its own process: `hold` runs
// until a line arrives on stdin (then answers "released"), so a test can have a call running
// while it sends SIGTERM; `whoami` answers with the identity it sees and how often it ran.
// Flags are ToolServer.main's.
import { createInterface } from "node:readline";

import { ToolServer } from "@agent-sidecar/toolserver";

const waiting: (() => void)[] = [];
createInterface({ input: process.stdin }).on("line", () => waiting.shift()?.());

const server = new ToolServer("fixture");
server.tool({ name: "hold", description: "Run until released through stdin." }, async (_args, context) => {
  await context.reportProgress(0, 1, "holding");
  await new Promise<void>((resolve, reject) => {
    waiting.push(resolve);
    context.signal.addEventListener("abort", () => reject(context.signal.reason as Error), { once: true });
  });
  return "released";
});
server.tool({ name: "ping", description: "Answer pong." }, () => "pong");
let whoamiRuns = 0;
server.tool({ name: "whoami", description: "Answer with the caller's identity." }, (_args, context) => {
  whoamiRuns += 1;
  return { runs: whoamiRuns, identity: context.identity };
});
server.main();
