// @ts-check
// DOM helpers for every module of the page. `el` sets attributes and appends
// children as text nodes, never as HTML: values from the API go through it.

/** @param {string} id */
export const $ = id => /** @type {HTMLElement} */ (document.getElementById(id))

/** @param {string} id */
export const input = id => /** @type {HTMLInputElement} */ (document.getElementById(id))

/**
 * @param {string} tag
 * @param {Record<string, string>} [attrs]
 * @param {...(Node | string)} children
 */
export function el (tag, attrs = {}, ...children) {
  const e = document.createElement(tag)
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v)
  e.append(...children)
  return e
}
