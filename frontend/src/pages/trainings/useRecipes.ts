import { useMemo } from 'react';
import { endpoints } from '../../api/endpoints';
import { useQuery } from '../../api/useQuery';
import { recipeSpecs } from './recipes';

/** The recipes the server has installed, as the create form shows them. */
export function useRecipes() {
  const q = useQuery('recipes', (s) => endpoints.recipes(s));
  const specs = useMemo(() => recipeSpecs(q.data?.data ?? []), [q.data]);
  return { ...q, specs };
}
