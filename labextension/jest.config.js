// Unit tests of the renderer on report fixtures that the Python test suite writes
// (tests/test_labextension.py sets GRADMAGIC_REPORT_FIXTURES and runs `jlpm test`).
module.exports = {
  testEnvironment: 'jsdom',
  roots: ['<rootDir>/src'],
  testMatch: ['**/__tests__/**/*.spec.ts'],
  setupFiles: ['<rootDir>/jest.setup.js'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }]
  }
};
