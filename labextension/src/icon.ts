import { LabIcon } from '@jupyterlab/ui-components';

/** ∇, the gradient: gradmagic's commands in the palette and the notebook toolbar. */
export const nablaIcon = new LabIcon({
  name: 'gradmagic:nabla',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
    '<path class="jp-icon3" fill="#616161" d="M1.5 2.5h13L8 14.5zM4.1 4 8 11.3 11.9 4z"/></svg>'
});
