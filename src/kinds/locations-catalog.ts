// The cloud locations Keel seeds into every org as built-ins (origin 'builtin'). Names follow
// `<provider>-<provider's own region id>`, the form the hosted service's examples use
// (`aws-us-west-2`, `aws-eu-central-1`). Coordinates are those of the region's city. Like the
// hosted service's locations (see the Terraform provider's cpln_location docs), each carries the
// tags cpln/city, cpln/country and cpln/continent.

export type CloudProvider = 'aws' | 'gcp' | 'azure' | 'linode' | 'vultr' | 'equinix' | 'oci';

export interface CatalogLocation {
  name: string;
  provider: CloudProvider;
  region: string;
  description: string;
  tags: Record<string, string>;
  spec: { enabled: boolean };
  status: {
    geo: { lat: number; lon: number; country: string; state: string; city: string; continent: string };
    ipRanges: string[];
  };
}

type Row = [provider: CloudProvider, region: string, label: string, lat: number, lon: number, country: string, state: string, city: string, continent: string];

const NA = 'North America';
const EU = 'Europe';
const AS = 'Asia';

const ROWS: Row[] = [
  ['aws', 'us-east-1', 'US East (N. Virginia)', 39.0438, -77.4874, 'USA', 'Virginia', 'Ashburn', NA],
  ['aws', 'us-east-2', 'US East (Ohio)', 39.9612, -82.9988, 'USA', 'Ohio', 'Columbus', NA],
  ['aws', 'us-west-1', 'US West (N. California)', 37.7749, -122.4194, 'USA', 'California', 'San Francisco', NA],
  ['aws', 'us-west-2', 'US West (Oregon)', 45.8399, -119.7006, 'USA', 'Oregon', 'Boardman', NA],
  ['aws', 'ca-central-1', 'Canada (Central)', 45.5019, -73.5674, 'Canada', 'Quebec', 'Montreal', NA],
  ['aws', 'eu-central-1', 'Europe (Frankfurt)', 50.1109, 8.6821, 'Germany', 'Hesse', 'Frankfurt', EU],
  ['aws', 'eu-west-1', 'Europe (Ireland)', 53.3498, -6.2603, 'Ireland', 'Leinster', 'Dublin', EU],
  ['aws', 'eu-west-2', 'Europe (London)', 51.5072, -0.1276, 'United Kingdom', 'England', 'London', EU],
  ['aws', 'ap-northeast-1', 'Asia Pacific (Tokyo)', 35.6762, 139.6503, 'Japan', 'Tokyo', 'Tokyo', AS],
  ['aws', 'ap-southeast-1', 'Asia Pacific (Singapore)', 1.3521, 103.8198, 'Singapore', 'Singapore', 'Singapore', AS],
  ['aws', 'ap-southeast-2', 'Asia Pacific (Sydney)', -33.8688, 151.2093, 'Australia', 'New South Wales', 'Sydney', 'Oceania'],
  ['aws', 'ap-south-1', 'Asia Pacific (Mumbai)', 19.076, 72.8777, 'India', 'Maharashtra', 'Mumbai', AS],
  ['aws', 'sa-east-1', 'South America (Sao Paulo)', -23.5505, -46.6333, 'Brazil', 'Sao Paulo', 'Sao Paulo', 'South America'],
  ['gcp', 'us-east1', 'US East (South Carolina)', 33.196, -80.0131, 'USA', 'South Carolina', 'Moncks Corner', NA],
  ['gcp', 'us-central1', 'US Central (Iowa)', 41.2619, -95.8608, 'USA', 'Iowa', 'Council Bluffs', NA],
  ['gcp', 'us-west1', 'US West (Oregon)', 45.5946, -121.1787, 'USA', 'Oregon', 'The Dalles', NA],
  ['gcp', 'europe-west1', 'Europe West (Belgium)', 50.45, 3.8167, 'Belgium', 'Hainaut', 'Saint-Ghislain', EU],
  ['gcp', 'europe-west3', 'Europe West (Frankfurt)', 50.1109, 8.6821, 'Germany', 'Hesse', 'Frankfurt', EU],
  ['gcp', 'asia-northeast1', 'Asia Northeast (Tokyo)', 35.6762, 139.6503, 'Japan', 'Tokyo', 'Tokyo', AS],
  ['gcp', 'me-west1', 'Middle East West (Tel Aviv)', 32.0853, 34.7818, 'Israel', 'Tel Aviv', 'Tel Aviv', AS],
  ['azure', 'eastus2', 'East US 2 (Virginia)', 36.6676, -78.3875, 'USA', 'Virginia', 'Boydton', NA],
  ['azure', 'westus2', 'West US 2 (Washington)', 47.2343, -119.8526, 'USA', 'Washington', 'Quincy', NA],
  ['azure', 'centralus', 'Central US (Iowa)', 41.5868, -93.625, 'USA', 'Iowa', 'Des Moines', NA],
  ['azure', 'westeurope', 'West Europe (Netherlands)', 52.3676, 4.9041, 'Netherlands', 'North Holland', 'Amsterdam', EU],
  ['azure', 'northeurope', 'North Europe (Ireland)', 53.3498, -6.2603, 'Ireland', 'Leinster', 'Dublin', EU],
  ['linode', 'us-ord', 'Chicago, IL', 41.8781, -87.6298, 'USA', 'Illinois', 'Chicago', NA],
  ['linode', 'us-east', 'Newark, NJ', 40.7357, -74.1724, 'USA', 'New Jersey', 'Newark', NA],
  ['linode', 'eu-central', 'Frankfurt, DE', 50.1109, 8.6821, 'Germany', 'Hesse', 'Frankfurt', EU],
  ['linode', 'ap-south', 'Singapore, SG', 1.3521, 103.8198, 'Singapore', 'Singapore', 'Singapore', AS],
  ['vultr', 'ewr', 'New Jersey', 40.5549, -74.4643, 'USA', 'New Jersey', 'Piscataway', NA],
  ['vultr', 'lax', 'Los Angeles', 34.0522, -118.2437, 'USA', 'California', 'Los Angeles', NA],
  ['vultr', 'ams', 'Amsterdam', 52.3676, 4.9041, 'Netherlands', 'North Holland', 'Amsterdam', EU],
  ['vultr', 'nrt', 'Tokyo', 35.6762, 139.6503, 'Japan', 'Tokyo', 'Tokyo', AS],
  ['equinix', 'da', 'Dallas metro', 32.7767, -96.797, 'USA', 'Texas', 'Dallas', NA],
  ['equinix', 'sv', 'Silicon Valley metro', 37.3382, -121.8863, 'USA', 'California', 'San Jose', NA],
  ['equinix', 'ny', 'New York metro', 40.7128, -74.006, 'USA', 'New York', 'New York', NA],
  ['equinix', 'am', 'Amsterdam metro', 52.3676, 4.9041, 'Netherlands', 'North Holland', 'Amsterdam', EU],
  ['oci', 'us-ashburn-1', 'US East (Ashburn)', 39.0438, -77.4874, 'USA', 'Virginia', 'Ashburn', NA],
  ['oci', 'us-phoenix-1', 'US West (Phoenix)', 33.4484, -112.074, 'USA', 'Arizona', 'Phoenix', NA],
  ['oci', 'eu-frankfurt-1', 'Germany Central (Frankfurt)', 50.1109, 8.6821, 'Germany', 'Hesse', 'Frankfurt', EU],
  ['oci', 'ap-tokyo-1', 'Japan East (Tokyo)', 35.6762, 139.6503, 'Japan', 'Tokyo', 'Tokyo', AS],
];

const PROVIDER_LABEL: Record<CloudProvider, string> = {
  aws: 'AWS',
  gcp: 'GCP',
  azure: 'Azure',
  linode: 'Linode',
  vultr: 'Vultr',
  equinix: 'Equinix',
  oci: 'OCI',
};

export const LOCATIONS_CATALOG: readonly CatalogLocation[] = ROWS.map(
  ([provider, region, label, lat, lon, country, state, city, continent]) => ({
    name: `${provider}-${region}`,
    provider,
    region,
    description: `${PROVIDER_LABEL[provider]} ${label}`,
    tags: { 'cpln/city': city, 'cpln/country': country, 'cpln/continent': continent },
    spec: { enabled: true },
    status: { geo: { lat, lon, country, state, city, continent }, ipRanges: [] },
  }),
);
