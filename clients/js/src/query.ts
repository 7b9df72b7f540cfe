/** A query parameter's value; null and undefined leave the parameter out. */
export type QueryValue = string | number | boolean | null | undefined;

/** `?a=1&b=x` of the parameters that are set (`""` when none is). */
export function queryStringOf(params: object | undefined): string {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params ?? {}) as [string, QueryValue][]) {
    if (value !== undefined && value !== null) query.set(name, String(value));
  }
  const text = query.toString();
  return text ? `?${text}` : "";
}
