/** Log lines on stderr (stdout carries only the `listening on` line). */

export const LEVELS = ["debug", "info", "warn", "error"] as const;
export type LogLevel = (typeof LEVELS)[number];

export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** A logger writing `time LEVEL name: message` lines to stderr at `level` and above. */
export function stderrLogger(name: string, level: LogLevel = "info"): Logger {
  const floor = LEVELS.indexOf(level);
  const at = (lvl: LogLevel) => (message: string) => {
    if (LEVELS.indexOf(lvl) >= floor) {
      process.stderr.write(`${new Date().toISOString()} ${lvl.toUpperCase()} ${name}: ${message}\n`);
    }
  };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}
