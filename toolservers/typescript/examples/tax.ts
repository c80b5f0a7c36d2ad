// A tool server in ten lines: `node build/examples/tax.js --port 7005` after `npm run build`.
import { ToolServer } from "@agent-sidecar/toolserver";

const RATES: Record<string, number> = { DE: 0.19, FR: 0.2, GB: 0.2, US: 0.07 }; // example rates
const server = new ToolServer("tax");
server.tool(
  {
    name: "calculate_tax",
    description: "Calculate the sales tax on an amount for a country, at fixed example rates.",
    input: {
      type: "object",
      properties: { amount: { type: "number", minimum: 0 }, country: { enum: Object.keys(RATES) } },
      required: ["amount", "country"],
    },
    readOnly: true,
    idempotent: true,
  },
  ({ amount, country }: { amount: number; country: string }) => ({
    amount, country, tax: Math.round(amount * (RATES[country] ?? 0) * 100) / 100, example_data: true,
  }),
);
server.main();
