/** The version of this package; the loaded .wasm must report the same (checked by `init`). */
export const VERSION = "0.1.0";
