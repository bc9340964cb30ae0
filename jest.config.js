// Unit tests are pure and fast; integration tests start real services and run one file at a time.
const transform = { '^.+\\.ts$': ['@swc/jest', { jsc: { target: 'es2022' } }] };
module.exports = {
  projects: [
    { displayName: 'unit', testMatch: ['<rootDir>/test/unit/**/*.test.ts'], transform, testEnvironment: 'node' },
    {
      displayName: 'integration',
      testMatch: ['<rootDir>/test/integration/**/*.test.ts'],
      transform,
      testEnvironment: 'node',
      globalSetup: '<rootDir>/test/integration/globalSetup.ts',
      globalTeardown: '<rootDir>/test/integration/globalTeardown.ts',
    },
  ],
};
