import { useEffect, useState, type RefObject } from 'react';

/**
 * Whether the element is on screen (with a margin), so live channels are
 * subscribed only for what a person can see. Without IntersectionObserver
 * everything counts as visible.
 */
export function useVisible(ref: RefObject<Element | null>, margin = '200px'): boolean {
  const [visible, setVisible] = useState(typeof IntersectionObserver === 'undefined');
  useEffect(() => {
    const el = ref.current;
    if (!el || typeof IntersectionObserver === 'undefined') return;
    const io = new IntersectionObserver((entries) => setVisible(entries.some((e) => e.isIntersecting)), { rootMargin: margin });
    io.observe(el);
    return () => io.disconnect();
  }, [ref, margin]);
  return visible;
}
