// A tool server for the lifecycle tests, run as its own process: `hold` runs until a line
// arrives on stdin (then answers "released"), so a test can have a call running while it
// sends SIGTERM. Flags are ToolServer.main's.
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
server.main();
